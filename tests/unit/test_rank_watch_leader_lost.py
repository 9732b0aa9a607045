"""A node's leader rank killed while the other ranks of its node run is named as that rank (`lost`, its
process gone), published at the store by the lowest rank of its node still running; "its node ... sent
no heartbeat" is said only when no rank of the node is left to say more. Ranks of two nodes in this
process on a store in memory with the clock passed in; the killed ones are real processes ended by
SIGKILL."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import time
from pathlib import Path

from lifecycle.rankwatch import EXIT_CODE, RankWatch
from tests.unit.test_rank_watch_nodes import Counting, first, job
from tests.unit.test_rank_watch_verdicts import Emitted


def killed_pid() -> int:
    """The pid of a process that was SIGKILLed (and reaped)."""
    child = subprocess.Popen(["sleep", "60"])
    child.send_signal(signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL
    return child.pid


def killed(watches: dict[int, RankWatch], ranks: list[int]) -> dict[int, int]:
    """Ranks `ranks` killed: every other rank of their node sees each one's pid gone. rank -> pid."""
    pids = {rank: killed_pid() for rank in ranks}
    for watch in watches.values():
        leader = watch._node.leader
        for rank, pid in pids.items():
            if rank in watch._node.peers:
                watch._node.peers[rank] = pid
            if leader is not None and leader.rank == rank:
                object.__setattr__(watch._node, "leader", dataclasses.replace(leader, pid=pid))
    return pids


def test_a_killed_leader_is_published_as_that_rank_by_the_next_rank_of_its_node(tmp_path: Path) -> None:
    store = Counting()
    w = job(store, tmp_path, {"a": [0, 1, 2], "b": [3]})
    pid = killed(w, [0])[0]
    store.ops.clear()
    w[2].tick(100.0)
    assert sum(store.ops.values()) == 0 and first(store) is None, "rank 1 runs: rank 2 leaves it to rank 1"
    noticed = w[2].peer_failure()
    assert noticed is not None and (noticed.rank, noticed.kind) == (0, "lost"), "it knows at once, on its board"
    w[1].tick(100.0)
    lost = first(store)
    assert lost is not None and (lost.rank, lost.state, lost.kind) == (0, "DISTRIBUTED", "lost")
    assert lost.error == f"its process (pid {pid}) is gone without a failure record: killed or crashed"
    assert sum(store.ops.values()) == 6  # once, by one rank of the node: `first` read (2), 2 writes, read again (2)


def test_the_other_nodes_name_the_killed_leader_as_that_rank_never_its_node_as_lost(tmp_path: Path) -> None:
    store = Counting()
    w = job(store, tmp_path, {"a": [0, 1, 2], "b": [3]})
    killed(w, [0])
    w[1].tick(100.0)
    emitted, exits = Emitted(), list[int]()
    w[3]._exit = exits.append
    with w[3].watching(emitted, "step 4", "CALLBACKS_BOUND", deadline=False):  # node b's rank, blocked
        for now in (100.0, 101.0, 108.0, 109.0):  # past node a's silence: node b reads `first` first
            w[3].tick(now)
        w[3].tick(time.monotonic() + 3.0)
    assert exits == [EXIT_CODE]
    [(event, fields)] = emitted
    assert (event, fields["peer_rank"], fields["peer_kind"]) == ("peer_failed", 0, "lost")
    assert "its process" in fields["error"] and "node" not in fields["error"]


def test_a_killed_leader_and_next_rank_are_published_by_the_rank_after_them(tmp_path: Path) -> None:
    store = Counting()
    w = job(store, tmp_path, {"a": [0, 1, 2], "b": [3]})
    killed(w, [0, 1])
    w[2].tick(100.0)
    lost = first(store)
    assert lost is not None and (lost.rank, lost.kind) == (0, "lost") and "its process" in lost.error


def test_a_whole_node_killed_is_named_as_its_node_by_the_node_before_it(tmp_path: Path) -> None:
    store = Counting()
    w = job(store, tmp_path, {"a": [0, 1, 2], "b": [3]})
    killed(w, [0, 1, 2])  # no rank of node a is left to tick
    for now in (100.0, 101.0, 108.0):
        w[3].tick(now)
    lost = first(store)
    assert lost is not None and (lost.rank, lost.kind) == (0, "lost") and "its node a sent no heartbeat" in lost.error


def test_a_leader_whose_node_mates_cannot_reach_the_store_is_left_to_the_ring(tmp_path: Path) -> None:
    store = Counting()
    w = job(store, tmp_path, {"a": [0, 1], "b": [2]})
    killed(w, [0])

    def unreachable() -> Counting:
        raise ConnectionRefusedError("the store's host is gone")

    w[1]._watcher_store = unreachable
    w[1].tick(100.0)
    assert first(store) is None
    noticed = w[1].peer_failure()
    assert noticed is not None and (noticed.rank, noticed.kind) == (0, "lost")
