"""The rank watch's check-in (_watch.py): each rank's writes, the wait for all, and what a rank then
learns of its node. Every function here is a few store operations per rank (register: 4 and 1 for the
world, a node's first rank 3 more, the last rank 2 more; the wait: 1 and 1 for the gate; join: 3), once
per initialization.

Keys, under this initialization's rendezvous prefix and `ranks/`:
    world            the first rank's job and world size: a rank of another world fails at once (`_world.py`)
    checkin/<rank>   each rank, before `init_process_group`
    host/<node>[/n]  a count of the ranks on node <node>, and the n-th one's `rank:pid`; the first one
                     leads the node, and its entry is `rank:pid:nonce:index` (the node-local board's
                     name, and the node's index in the ring)
    nodes            a counter: each node leader's index
    node/<index>     the node's `leader rank:name`; beat/<index> its heartbeat, `seq:state` ("done" at its end)
    arrived          a counter; the rank that brings it to world_size makes `first` (empty) and sets `all_arrived`
    failure/<rank>   what a failed rank publishes: {rank, state, error, kind}
    first            the first failure published (`compare_set`: the first writer wins)
"""

from __future__ import annotations

import os
import secrets
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from lifecycle.errors import DistributedError
from lifecycle.rankwatch._board import Board, board_root
from lifecycle.rankwatch._failure import Failure, rank_list
from lifecycle.rankwatch._liveness import host_key, identity, local_pids
from lifecycle.rankwatch._node import Node, NodeLeader
from lifecycle.rankwatch._world import World, agree, gate

if TYPE_CHECKING:
    from torch.distributed import Store


def register(store: Store, rank: int, world_size: int, node: str, world: World | None = None) -> int | None:
    """This rank's check-in writes; the first on its node leads it (draws the board's name and its
    ring index, and writes its first beat): its index, else None. The last to arrive makes `first`
    (empty, so a leader's `multi_get` never blocks on it) and opens the gate. First of all, `world`
    (when given) must agree with the first rank's (`_world.agree`: 1 operation)."""
    if world is not None:
        agree(store, world)
    key = host_key(node)
    n = int(store.add(key, 1))
    entry, index = identity(rank), None
    if n == 1:
        index = int(store.add("nodes", 1))
        store.set(f"node/{index}", f"{rank}:{node}".encode())
        store.set(f"beat/{index}", b"0:DISTRIBUTED")
        entry = NodeLeader(rank=rank, pid=os.getpid(), nonce=secrets.token_hex(8), index=index).entry()
    store.set(f"{key}/{n}", entry)
    store.set(f"checkin/{rank}", b"1")
    if int(store.add("arrived", 1)) >= world_size:
        store.compare_set("first", b"", b"")
        store.compare_set("all_arrived", b"", b"1")  # a conflict written there stays
    return index


def await_all(store: Store, timeout_s: float, *, interruptible: bool, world: World | None = None) -> None:
    """Until every rank has checked in, at most `timeout_s`. Interruptible: polled, 1 ms at first
    and doubling to 0.1 s, so the wrapper's restart request lands within 0.1 s (in one wait in
    the store it landed only at the deadline, `startup.timeout_s`: measured). With `world`, the
    gate is read once (`_world.gate`): a rank of another world may have closed it."""
    if not interruptible:
        store.wait(["all_arrived"], timedelta(seconds=timeout_s))
    else:
        _poll_gate(store, timeout_s)
    if world is not None:
        gate(store, world)


def _poll_gate(store: Store, timeout_s: float) -> None:
    deadline, pause = time.monotonic() + timeout_s, 0.001
    while not store.check(["all_arrived"]):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"not every rank checked in within {timeout_s:g} s")
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(2 * pause, 0.1)


def join(store: Store, rank: int, node: str, *, board_dir: str | None) -> Node:
    """After every rank checked in: this node's ranks and their pids, its leader and board (none when
    the board cannot be made: the rank then talks to the store itself), and the node count."""
    key = host_key(node)
    here = int(store.add(key, 0))  # every rank here has written its entry by now
    entries = store.multi_get([f"{key}/{n}" for n in range(1, here + 1)])
    leader = NodeLeader.parse(entries[0]) if entries else None
    board = None
    if leader is not None:
        try:
            board = Board(board_root(board_dir), leader.nonce, rank)
        except OSError:
            board = None
    nodes = int(store.add("nodes", 0))
    peers = local_pids(entries, rank) if board is not None else {}  # without a board: a node of its own
    return Node(peers=peers, leader=leader, board=board, nodes=nodes)


def missing(store: Store, world_size: int) -> list[int]:
    """Ranks that have not checked in: halves of the rank range asked with one `check` each, so m
    missing of N cost about 2·m·log2(N) operations (`multi_get` would block on them)."""
    out: list[int] = []
    spans = [(0, world_size)]
    while spans:
        lo, hi = spans.pop()
        if store.check([f"checkin/{r}" for r in range(lo, hi)]):
            continue
        if hi - lo == 1:
            out.append(lo)
        else:
            mid = (lo + hi) // 2
            spans += [(mid, hi), (lo, mid)]
    return out


def timed_out(
    world_size: int, timeout_s: float, *, missing: list[int] | None = None, arrived: int = 0
) -> DistributedError:
    """The rendezvous's timeout: naming the `missing` ranks (a node's first rank), else counting the `arrived`."""
    if missing is None:
        return DistributedError(
            f"rendezvous timed out after {timeout_s:g} s: {arrived} of {world_size} ranks arrived (the first "
            "rank of this node names the missing ones). Start the missing ranks, or raise startup.timeout_s "
            "if they are slow to start",
            field="startup.timeout_s",
        )
    return DistributedError(
        f"rendezvous timed out after {timeout_s:g} s: {world_size - len(missing)} of {world_size} ranks arrived; "
        f"missing: {rank_list(missing)}. Start the missing ranks, or raise startup.timeout_s if they are slow to start",
        field="startup.timeout_s",
    )


def host_lost(host: int, rank: int, exc: BaseException) -> tuple[Failure, DistributedError]:
    """The store's host, rank `host`, closed the connection while `rank` waited at the check-in: it is
    gone (killed, or failed and shut down): the failure naming it (`peer_failed`), and the error to raise."""
    what = f"the rendezvous store it hosts closed the connection during the check-in ({type(exc).__name__}: {exc})"
    error = DistributedError(
        f"rank {host}, the rendezvous store's host, was lost while rank {rank} waited for every rank to check "
        f"in ({type(exc).__name__}: {exc}). The root cause is on rank {host}: see its log, then restart the job",
        field="startup",
    )
    return Failure(rank=host, state="unknown", error=what, kind="lost"), error
