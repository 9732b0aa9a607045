"""The rank watch's check-in (_rank_checkin.py): each rank's writes, the wait for all, and what a rank then
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
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

from lifecycle.errors import DistributedError
from lifecycle.rankwatch._board import Board, board_root
from lifecycle.rankwatch._failure import Failure, rank_list
from lifecycle.rankwatch._liveness import host_key, identity, local_pids, store_closed
from lifecycle.rankwatch._meeting import Meeting, Word
from lifecycle.rankwatch._node import Node, NodeLeader
from lifecycle.rankwatch._sweep import sweep
from lifecycle.rankwatch._world import World, agree, gate

if TYPE_CHECKING:
    from torch.distributed import Store

    from lifecycle.log import JSONValue


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


def register_node(
    store: Store, batch: dict[int, int], world_size: int, node: str, leader: tuple[int, str], world: World | None
) -> int | None:
    """A node's check-in by its meeting's leader (`_meeting.py`): the ranks of `batch` (rank -> pid, the
    leader first in its first batch) as `register` writes each, in 3 operations (4 for a node's first
    batch: the node's index; 5 with `world`, agreed once by the first batch; the last batch 2 more).
    `leader`: its rank and board nonce. Returns the node's index when the leader leads the node."""
    if world is not None and leader[0] in batch:
        agree(store, world)
    key = host_key(node)
    end = int(store.add(key, len(batch)))
    keys: list[str] = []
    values: list[bytes] = []
    index = None
    for n, (rank, pid) in enumerate(batch.items(), end - len(batch) + 1):
        entry = f"{rank}:{pid}".encode()
        if n == 1 and rank == leader[0]:
            index = int(store.add("nodes", 1))
            entry = NodeLeader(rank=rank, pid=pid, nonce=leader[1], index=index).entry()
            keys += [f"node/{index}", f"beat/{index}"]
            values += [f"{rank}:{node}".encode(), b"0:DISTRIBUTED"]
        keys += [f"{key}/{n}", f"checkin/{rank}"]
        values += [entry, b"1"]
    store.multi_set(keys, values)
    if int(store.add("arrived", len(batch))) >= world_size:
        store.compare_set("first", b"", b"")
        store.compare_set("all_arrived", b"", b"1")
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


def lead(store: Store, meeting: Meeting, push: Callable[[], None], timeout_s: float, *, interruptible: bool) -> None:
    """A meeting's leader: check its node's ranks in as they arrive (`push`: `Meeting.due` and
    `register_node`) and wait for every rank of the job: in the store (1 operation) once every rank the
    launcher counts on the node is in, else polled (1 ms at first, doubling to 0.1 s)."""
    deadline, pause = time.monotonic() + timeout_s, 0.001
    while True:
        push()
        complete = meeting.size is not None and len(meeting.pushed) >= meeting.size
        if complete and not interruptible:
            store.wait(["all_arrived"], timedelta(seconds=max(0.001, deadline - time.monotonic())))
            return
        if meeting.pushed and store.check(["all_arrived"]):
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"not every rank checked in within {timeout_s:g} s")
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(2 * pause, 0.1)


class LeaderSaid(Exception):
    """A meeting's leader failed to check the node in: `result` is its word (`failed`), or the follower's."""

    def __init__(self, result: Word) -> None:
        super().__init__(str(result.get("detail") or result.get("failed")))
        self.result = result


def joined(entries: list[bytes], nodes: int) -> Word:
    """A leader's word when every rank checked in: its node's entries and the job's node count."""
    return {"entries": [e.decode(errors="replace") for e in entries], "nodes": nodes}


def failed(error: BaseException, cause: BaseException, missing: list[int] | None) -> Word:
    """A leader's word when the check-in failed: `timeout` (with the `missing` ranks), `host_lost`, or `error`."""
    kind = "timeout" if missing is not None else "host_lost" if store_closed(cause) else "error"
    out: Word = {"failed": kind, "detail": str(error), "field": getattr(error, "field", "startup")}
    return out if missing is None else {**out, "missing": missing}


def follow(meeting: Meeting, timeout_s: float) -> tuple[list[bytes], int]:
    """A meeting's other rank: the leader's word (`joined`) as entries and node count, or `LeaderSaid`."""
    result = meeting.await_result(timeout_s)
    entries, nodes = result.get("entries"), result.get("nodes")
    if result.get("failed") is not None or not isinstance(entries, list) or not isinstance(nodes, int):
        raise LeaderSaid(result)
    return [str(e).encode() for e in entries], nodes


def leader_lost(meeting: Meeting, said: JSONValue = "leader_gone") -> Failure:
    """A meeting's leader that told the node's ranks nothing: its process gone (`leader_gone`), or alive
    and silent past the check-in's deadline and a heartbeat's silence (`silent`: stopped or hung)."""
    if said == "silent":
        error = f"its process (pid {meeting.leader_pid}) said nothing while it checked its node in: stopped or hung"
    else:
        error = f"its process (pid {meeting.leader_pid}) is gone without a failure record while it checked its node in"
    return Failure(rank=meeting.leader, state="DISTRIBUTED", error=error, kind="lost")


def leader_error(leader: int, rank: int, result: Word) -> DistributedError:
    """The error of a meeting's other rank when its leader, rank `leader`, did not check the node in."""
    said = result.get("failed")
    if said == "leader_gone":
        why = "its process is gone (killed or crashed) before every rank checked in"
    elif said == "silent":
        why = "it said nothing until the check-in's deadline and a heartbeat's silence past it (stopped or hung)"
    else:
        why = f"its check-in failed: {result.get('detail')}"
    return DistributedError(
        f"rank {leader}, which checks in the ranks of rank {rank}'s node, did not: {why}. The root cause is on "
        f"rank {leader}: see its log, then restart the job",
        field=str(result.get("field") or "startup"),
    )


def _poll_gate(store: Store, timeout_s: float) -> None:
    deadline, pause = time.monotonic() + timeout_s, 0.001
    while not store.check(["all_arrived"]):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"not every rank checked in within {timeout_s:g} s")
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(2 * pause, 0.1)


def join(store: Store, rank: int, node: str, *, board_dir: str | None) -> Node:
    """After every rank checked in: this node's ranks and their pids, its leader and board (none when
    the board cannot be made: the rank then talks to the store itself), and the node count. The node's
    leader then sweeps the board's root (`_sweep.py`; a meeting's leader sweeps at its arrival instead)."""
    entries, nodes = node_entries(store, node)
    joined = node_of(entries, nodes, rank, board_dir=board_dir)
    if joined.board is not None and joined.leader is not None and joined.leader.rank == rank:
        sweep(joined.board.path.parent)
    return joined


def node_entries(store: Store, node: str) -> tuple[list[bytes], int]:
    """The check-in entries of `node`'s ranks (its leader's first) and the job's node count: 2 operations."""
    key = host_key(node)
    here, nodes = (int(v) for v in store.multi_get([key, "nodes"]))  # every rank here has written its entry
    return store.multi_get([f"{key}/{n}" for n in range(1, here + 1)]), nodes


def node_of(entries: list[bytes], nodes: int, rank: int, *, board_dir: str | None) -> Node:
    """What `rank` knows of its node from its ranks' check-in `entries` (see `join`)."""
    leader = NodeLeader.parse(entries[0]) if entries else None
    board = None
    if leader is not None:
        try:
            board = Board(board_root(board_dir), leader.nonce, rank)
        except OSError:
            board = None
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
