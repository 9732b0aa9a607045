"""The rank watch at scale (docs/failures.md#the-rank-watch-at-scale): one rank of each node talks to the
store, the others only to their node's board (real files), and the store's host sees two operations a
round per node. On a store in memory with the clock passed in, and real processes for the dead ones."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lifecycle.log.records import Record
from lifecycle.rankwatch import EXIT_CODE, HOST_OPS_PER_S, Failure, RankWatch, WatchSettings
from lifecycle.testing import host_key
from tests.unit.test_rank_watch_verdicts import Emitted, MemoryStore


class Counting(MemoryStore):
    """A store in memory that counts the operations made on it, by kind."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __getattribute__(self, name: str) -> Any:
        if name in ("add", "set", "get", "check", "multi_get", "multi_set", "compare_set", "wait"):
            object.__getattribute__(self, "ops")[name] += 1
        return object.__getattribute__(self, name)


class Ctx:
    def __init__(self) -> None:
        self.emitted = Emitted()
        self.trigger = SimpleNamespace(value="init_distributed")

    def emit(self, record: Record) -> None:
        self.emitted(record)


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def job(
    store: MemoryStore, tmp_path: Path, layout: dict[str, list[int]], *, timeout_s: float = 24.0
) -> dict[int, RankWatch]:
    """Every rank of `layout` (node -> its ranks, first one first) checked in and joined, in this process."""
    world = sum(len(ranks) for ranks in layout.values())
    watches = {
        rank: RankWatch(
            store,
            rank=rank,
            world_size=world,
            settings=WatchSettings(timeout_s=timeout_s, poll_s=0.1),
            node=node,
            board_dir=str(tmp_path),
        )
        for node, ranks in layout.items()
        for rank in ranks
    }
    for watch in watches.values():
        watch.checkin.register()
    for watch in watches.values():
        watch.checkin.await_all()
        watch.join_node()
    return watches


def with_pid(store: MemoryStore, node: str, rank: int, pid: int) -> None:
    """Rank `rank`'s check-in entry on `node` says it runs as process `pid` (a dead one, say)."""
    key = host_key(node)
    for n in range(1, int(store.data[key]) + 1):
        parts = store.data[f"{key}/{n}"].decode().split(":")
        if parts[0] == str(rank):
            store.data[f"{key}/{n}"] = ":".join([parts[0], str(pid), *parts[2:]]).encode()


def first(store: MemoryStore) -> Failure | None:
    raw = store.data.get("first", b"")
    return Failure.decode(raw) if raw else None


def test_the_first_rank_of_each_node_leads_it_and_the_others_share_its_board(tmp_path: Path) -> None:
    store = MemoryStore()
    w = job(store, tmp_path, {"a": [0, 1, 2], "b": [3, 4]})
    assert [r for r, watch in w.items() if watch.leader] == [0, 3]
    assert w[0].nodes == 2 and w[3].nodes == 2
    assert w[1]._node.board is not None and w[0]._node.board is not None
    assert w[1]._node.board.path == w[2]._node.board.path == w[0]._node.board.path
    assert w[3]._node.board is not None and w[3]._node.board.path != w[0]._node.board.path
    assert w[1]._node.peers == {0: os.getpid(), 2: os.getpid()}
    assert store.data["first"] == b"" and store.data["all_arrived"] == b"1"


def test_ranks_that_do_not_lead_their_node_never_touch_the_store_while_all_is_well(tmp_path: Path) -> None:
    store = Counting()
    w = job(store, tmp_path, {"a": [0, 1, 2, 3]})
    store.ops.clear()
    for now in range(100, 200):
        for rank in (1, 2, 3):
            w[rank].tick(float(now))
    assert sum(store.ops.values()) == 0


def test_a_leader_makes_two_operations_a_round_and_a_round_lasts_interval_s(tmp_path: Path) -> None:
    store = Counting()
    w = job(store, tmp_path, {"a": [0, 1], "b": [2, 3]})
    store.ops.clear()
    for step in range(100):  # 10 s of polls every 0.1 s; the round is two polls (2 nodes)
        for rank in (0, 1, 2, 3):
            w[rank].tick(100.0 + step * 0.1)
    assert w[0].interval_s == w[2].interval_s == 0.2
    assert dict(store.ops) == {"set": 100, "multi_get": 100} and first(store) is None


def test_the_round_grows_with_the_nodes_so_the_host_sees_at_most_host_ops_per_s() -> None:
    from lifecycle.testing import Ring

    six = WatchSettings(timeout_s=24.0, poll_s=0.5)  # stale_s 6 s
    for nodes in (1, 2, 512, 1_500, 16_384, 131_072):
        ring = Ring(1, nodes, six)
        assert 2 * nodes / ring.interval_s <= max(HOST_OPS_PER_S, 2 * nodes / 0.5)
        assert ring.stale_s >= 3 * ring.interval_s
    assert Ring(1, 16_384, six).interval_s == pytest.approx(2 * 16_384 / 6_000)  # 5.46 s
    assert Ring(1, 16_384, six).stale_s == pytest.approx(3 * 2 * 16_384 / 6_000)  # three rounds
    assert HOST_OPS_PER_S == 6_000  # docs/failures.md's figure: at most 6,000 ops/s at the host, any size
    assert Ring(1, 2, six).interval_s == 1.0  # two polls across nodes, as torchrun's agents
    assert Ring(1, 512, six).interval_s == 1.0  # 4,096 ranks: 1,024 ops/s at the host
    assert Ring(1, 1, six).interval_s == 0.5  # a lone node: its leader is the only client
    assert Ring(1, 1, six).successor is None and Ring(3, 3, six).successor == 1


class Timed(MemoryStore):
    """A store in memory that notes, at the watch's clock `now`, each node's beat (the first op of a round)."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.beats: dict[str, list[float]] = {}

    def set(self, key: str, value: bytes) -> None:
        if key.startswith("beat/"):
            self.beats.setdefault(key, []).append(round(self.now, 6))
        super().set(key, value)


def drive(
    store: Timed, watches: list[RankWatch], start: float, until: float, *, late: dict[float, float] | None = None
) -> None:
    """Each watch ticks when it asks to (`first_tick`, then `next_tick`), as its watcher thread would;
    `late`: a tick due at a key time comes at its value (a stalled process)."""
    wake = {watch.rank: watch.first_tick(start) for watch in watches}
    while (now := min(wake.values())) < until:
        for watch in [w for w in watches if wake[w.rank] == now]:
            store.now = (late or {}).get(round(now, 6), now)
            watch.tick(store.now)
            wake[watch.rank] = watch.next_tick(store.now)


def test_the_node_leaders_rounds_reach_the_store_spread_over_the_round_not_at_once(tmp_path: Path) -> None:
    store = Timed()
    w = job(store, tmp_path, {"a": [0, 1], "b": [2, 3], "c": [4, 5], "d": [6, 7]})
    store.beats.clear()
    drive(store, list(w.values()), 100.0, 100.84)
    assert w[0].interval_s == 0.2  # 4 nodes: the round is two polls; node i of 4 beats (i - 1) / 4 into it
    assert store.beats == {
        "beat/1": [100.0, 100.2, 100.4, 100.6, 100.8],
        "beat/2": [100.05, 100.25, 100.45, 100.65],
        "beat/3": [100.1, 100.3, 100.5, 100.7],
        "beat/4": [100.15, 100.35, 100.55, 100.75],
    }


def test_a_leader_whose_round_came_late_returns_to_its_own_point_of_the_round(tmp_path: Path) -> None:
    store = Timed()
    w = job(store, tmp_path, {"a": [0], "b": [1]})
    store.beats.clear()
    drive(store, [w[1]], 100.0, 100.99, late={100.3: 100.66})  # node b's round at 100.3 came at 100.66
    assert store.beats["beat/2"] == [100.1, 100.66, 100.7, 100.9]  # back on 100.1 + k/5
    store.beats.clear()
    drive(store, [w[0]], 200.0, 200.49, late={200.2: 200.28})  # less than a round late: the next one is on time
    assert store.beats["beat/1"] == [200.0, 200.28, 200.4]


def test_a_rank_that_does_not_lead_its_node_ticks_every_poll(tmp_path: Path) -> None:
    w = job(MemoryStore(), tmp_path, {"a": [0, 1], "b": [2, 3]})
    assert w[3].first_tick(100.0) == pytest.approx(100.1) and w[3].next_tick(100.1) == pytest.approx(100.2)
    assert w[2].first_tick(100.0) == pytest.approx(100.1)  # node b's leader: its round, half a round (0.2 s) in


def test_a_failure_the_leader_reads_in_the_store_reaches_its_node_through_the_board(tmp_path: Path) -> None:
    store = MemoryStore()
    w = job(store, tmp_path, {"a": [0, 1, 2], "b": [3]})
    w[3].publish(Failure(rank=3, state="MODEL_BUILT", error="ValueError: x", kind="exception"))
    w[1].tick(100.0)
    assert w[1].peer_failure() is None, "a rank that does not lead reads its board, not the store"
    w[0].tick(100.0)  # the leader reads `first` and posts it
    w[2].tick(100.0)
    for rank in (0, 1, 2):
        noticed = w[rank].peer_failure()
        assert noticed is not None and (noticed.rank, noticed.state) == (3, "MODEL_BUILT")


def test_two_ranks_of_one_node_posting_different_failures_leave_the_first_on_its_board(tmp_path: Path) -> None:
    """The store's host is gone, so each rank posts its own failure on the board: the first stays."""
    store = MemoryStore()
    w = job(store, tmp_path, {"a": [0, 1, 2], "b": [3]})
    store.fail_with = ConnectionResetError("the store's host is gone")
    earlier = Failure(rank=1, state="MODEL_BUILT", error="ValueError: bad shape", kind="exception")
    later = Failure(rank=2, state="CALLBACKS_BOUND", error="RuntimeError: gloo", kind="exception")
    w[1].publish(earlier)
    w[2].publish(later)
    board = w[0]._node.board
    assert board is not None and board.first() == earlier
    assert w[0].peer_failure() == earlier and w[2].peer_failure() == earlier


def test_the_leader_of_a_job_of_one_node_reads_first_in_its_round_and_posts_it(tmp_path: Path) -> None:
    store = MemoryStore()
    w = job(store, tmp_path, {"a": [0, 1]})
    store.data["first"] = Failure(rank=5, state="MODEL_BUILT", error="gone", kind="lost").encode()  # named elsewhere
    w[0].tick(100.0)  # no next node: its round reads `first` alone
    noticed = w[1].peer_failure()  # rank 1 reads only the board
    assert noticed is not None and (noticed.rank, noticed.state) == (5, "MODEL_BUILT")


def test_a_blocked_rank_that_does_not_lead_is_ended_by_what_its_board_says(tmp_path: Path) -> None:
    store, exits, emitted = MemoryStore(), [], Emitted()
    w = job(store, tmp_path, {"a": [0, 1], "b": [2]})
    w[1]._exit = exits.append
    w[2].publish(Failure(rank=2, state="CALLBACKS_BOUND", error="RuntimeError: y", kind="exception"))
    w[0].tick(100.0)
    with w[1].watching(emitted, "step 4", "CALLBACKS_BOUND", deadline=False):
        w[1].tick(time.monotonic())
        w[1].tick(time.monotonic() + 3.0)
    assert exits == [EXIT_CODE] and [(e, f["peer_rank"]) for e, f in emitted] == [("peer_failed", 2)]
    board = w[0]._node.board
    assert board is not None and not (board.path / "beat-1").exists()  # off the board, and not as done
    assert not board.said_done(1)


def test_a_rank_killed_on_a_node_is_published_by_its_leader_in_the_state_its_board_shows(tmp_path: Path) -> None:
    store = MemoryStore()
    w = job(store, tmp_path, {"a": [0, 1, 2]})
    with w[2].watching(Emitted(), "build_model", "MODEL_BUILT"):
        w[2].tick(100.0)  # its beat says MODEL_BUILT
    w[2]._stop.set()
    gone = dead_pid()
    with_pid(store, "a", 2, gone)
    for watch in w.values():
        watch._node.peers.update({2: gone} if watch.rank != 2 else {})
    w[1].tick(101.0)
    assert first(store) is None, "only the leader publishes for its node"
    assert w[1].peer_failure() is None, "and only the leader decides that a node-mate is lost"
    w[0].tick(101.0)
    lost = first(store)
    assert lost is not None and (lost.rank, lost.state, lost.kind) == (2, "MODEL_BUILT", "lost")
    assert f"its process (pid {gone}) is gone" in lost.error
    exits, emitted = [], Emitted()
    w[0]._exit = exits.append
    with w[0].watching(emitted, "step 4", "CALLBACKS_BOUND", deadline=False):  # the leader, blocked
        w[0].tick(time.monotonic() + 3.0)
    assert exits == [EXIT_CODE] and [(e, f["peer_rank"]) for e, f in emitted] == [("peer_failed", 2)]
    w[1].tick(102.0)
    assert w[1].peer_failure() == lost


def test_a_rank_whose_watcher_stands_still_for_stale_s_is_lost_though_its_process_exists(tmp_path: Path) -> None:
    """SIGSTOP, or a process hung with the GIL held: its pid is there, its beat is not."""
    store = MemoryStore()
    w = job(store, tmp_path, {"a": [0, 1]})
    w[1].tick(100.0)
    board = w[1]._node.board
    assert board is not None
    beat = board.path / "beat-1"
    past = time.time() - w[0].stale_s - 1
    os.utime(beat, (past, past))
    w[0].tick(100.0)
    lost = first(store)
    assert lost is not None and (lost.rank, lost.kind) == (1, "lost") and "stood still" in lost.error
    seconds = int(lost.error.split("stood still for ")[1].split(" s")[0])
    assert w[0].stale_s <= seconds <= w[0].stale_s + 3  # how long it stood still, not 0


def test_two_jobs_on_one_machine_never_share_a_node_board_and_it_is_private_to_the_user(tmp_path: Path) -> None:
    import stat

    boards = []
    for _ in range(2):  # the same node name, ranks and board directory: only the leader's nonce differs
        w = job(MemoryStore(), tmp_path, {"a": [0, 1]})
        board = w[1]._node.board
        assert board is not None and w[0]._node.board is not None and board.path == w[0]._node.board.path
        boards.append(board.path)
    assert boards[0] != boards[1]
    assert stat.S_IMODE(boards[0].parent.stat().st_mode) == stat.S_IMODE(boards[0].stat().st_mode) == 0o700


def test_a_lost_node_is_published_when_its_beat_stood_still_exactly_stale_s(tmp_path: Path) -> None:
    store = MemoryStore()
    w = job(store, tmp_path, {"a": [0], "b": [1]}, timeout_s=24.0)
    w[0].tick(100.0)
    w[0].tick(100.0 + w[0].stale_s - 0.5)
    assert first(store) is None
    w[0].tick(100.0 + w[0].stale_s)
    lost = first(store)
    assert lost is not None and (lost.rank, lost.kind) == (1, "lost")


def test_a_lost_node_whose_entry_names_no_rank_blames_no_rank(tmp_path: Path) -> None:
    store = MemoryStore()
    w = job(store, tmp_path, {"a": [0], "b": [1]}, timeout_s=24.0)
    store.data["node/2"] = b"?:b"  # the next node's entry, unreadable
    w[0].tick(100.0)
    w[0].tick(100.0 + w[0].stale_s + 1)
    lost = first(store)
    assert lost is not None and lost.kind == "lost" and lost.rank == -1 and "its node b sent no heartbeat" in lost.error


def test_a_leader_whose_store_fails_asks_again_once_a_poll_not_at_every_tick(tmp_path: Path) -> None:
    store = Counting()
    w = job(store, tmp_path, {"a": [0], "b": [1]})

    def broken(*args: object, **kwargs: object) -> None:
        store.ops["failed"] += 1
        raise ConnectionError("Connection reset by peer")

    store.set = broken  # type: ignore[method-assign]
    store.multi_get = broken  # type: ignore[method-assign]
    for step in range(100):  # 1 s of ticks every 10 ms; poll_s is 0.1 s
        w[0].tick(100.0 + step * 0.01)
    assert 9 <= store.ops["failed"] <= 11


def test_a_rank_that_stopped_its_watch_is_never_lost_and_the_last_one_out_removes_the_board(tmp_path: Path) -> None:
    store = MemoryStore()
    w = job(store, tmp_path, {"a": [0, 1, 2]})
    for watch in w.values():
        watch.tick(100.0)
    board = w[0]._node.board
    assert board is not None and sorted(p.name for p in board.path.iterdir()) == ["beat-0", "beat-1", "beat-2"]
    w[2].stop()
    gone = dead_pid()
    w[0]._node.peers[2] = gone
    w[0].tick(101.0)
    assert first(store) is None and 2 in w[0]._node.finished
    w[0].stop()
    assert store.data["beat/1"] == b"done"
    w[1].stop()
    assert not board.path.exists()


def test_a_node_whose_beat_stands_still_is_published_lost_by_the_node_before_it(tmp_path: Path) -> None:
    store = MemoryStore()
    w = job(store, tmp_path, {"a": [0, 1], "b": [2, 3], "c": [4]}, timeout_s=24.0)  # stale_s 6 s
    for now in (100.0, 101.0, 105.9):
        w[0].tick(now)  # node a watches node b, whose leader never beats
    assert first(store) is None
    w[0].tick(107.0)
    lost = first(store)
    assert lost is not None and (lost.rank, lost.state, lost.kind) == (2, "DISTRIBUTED", "lost")
    assert "its node b sent no heartbeat for 7 s" in lost.error


def test_a_node_that_said_done_is_never_lost_however_long_it_stays_quiet(tmp_path: Path) -> None:
    store = MemoryStore()
    w = job(store, tmp_path, {"a": [0], "b": [1]})
    w[1].stop()
    for now in (0.0, 10.0, 100.0, 1000.0):
        w[0].tick(now)
    assert first(store) is None


def test_the_last_rank_to_check_in_makes_first_empty_so_no_poll_blocks_on_it() -> None:
    store = MemoryStore()
    store.set("arrived", b"1")
    RankWatch(store, rank=1, world_size=3, settings=WatchSettings(timeout_s=24.0)).checkin.register()
    assert "first" not in store.data and "all_arrived" not in store.data
    RankWatch(store, rank=2, world_size=3, settings=WatchSettings(timeout_s=24.0)).checkin.register()
    assert store.data["first"] == b"" and store.data["all_arrived"] == b"1"
    store.data["first"] = Failure(rank=0, state="X", error="e", kind="exception").encode()
    store.set("arrived", b"2")
    RankWatch(store, rank=3, world_size=3, settings=WatchSettings(timeout_s=24.0)).checkin.register()
    assert first(store) == Failure(rank=0, state="X", error="e", kind="exception"), "a failure is never wiped"


def test_check_in_costs_a_few_operations_per_rank_and_per_node(tmp_path: Path) -> None:
    store = Counting()
    job(store, tmp_path, {f"n{i}": list(range(8 * i, 8 * i + 8)) for i in range(4)})
    ops = sum(store.ops.values())
    assert ops == 32 * (4 + 1 + 2) + 4 * 3 + 2  # register, wait, join; a leader's; the last rank's


@pytest.mark.parametrize("entry", [b"0:x:nonce:1", b"x:1:nonce:1", b"0:1:nonce:x", b"0:1:nonce", b"0:1:nonce:1:2"])
def test_a_node_entry_that_is_not_a_leaders_makes_each_rank_talk_to_the_store_itself(
    tmp_path: Path, entry: bytes
) -> None:
    store = MemoryStore()
    watches = {
        rank: RankWatch(
            store,
            rank=rank,
            world_size=2,
            settings=WatchSettings(timeout_s=24.0, poll_s=0.1),
            node="a",
            board_dir=str(tmp_path),
        )
        for rank in (0, 1)
    }
    for watch in watches.values():
        watch.checkin.register()
    store.data[f"{host_key('a')}/1"] = entry  # the node's first entry, not one the lifecycle wrote
    for watch in watches.values():
        watch.checkin.await_all()
        watch.join_node()
    assert all(w.leader and w._node.board is None and w._node.leader is None for w in watches.values())


def test_a_failure_a_rank_publishes_reaches_its_node_mates_by_the_board_and_is_never_its_own_peers(
    tmp_path: Path,
) -> None:
    store = MemoryStore()
    w = job(store, tmp_path, {"a": [0, 1, 2]})
    own = Failure(rank=1, state="MODEL_BUILT", error="ValueError: bad shape", kind="exception")
    w[1].publish(own)
    exits: list[int] = []
    w[1]._exit = exits.append
    with w[1].watching(Emitted(), "step 4", "CALLBACKS_BOUND", deadline=False):  # still working on
        w[1].tick(time.monotonic())
        w[1].tick(time.monotonic() + 3.0)
    assert w[1].peer_failure() is None and exits == []  # its own failure does not end it as a victim
    w[2].tick(100.0)  # not the leader: it reads only the board
    assert w[2].peer_failure() == own


def test_a_node_mate_that_left_done_does_not_hide_one_that_died_after_it(tmp_path: Path) -> None:
    store = MemoryStore()
    w = job(store, tmp_path, {"a": [0, 1, 2]})
    w[1].stop()  # rank 1 leaves the board as done, then its process ends
    w[0]._node.peers[1] = dead_pid()
    w[0].tick(100.0)
    assert first(store) is None and 1 in w[0]._node.finished
    w[0]._node.peers[2] = dead_pid()  # rank 2 dies without a word
    w[0].tick(101.0)
    lost = first(store)
    assert lost is not None and (lost.rank, lost.kind) == (2, "lost")


def test_stopping_a_watch_waits_for_a_round_in_progress_to_end(tmp_path: Path) -> None:
    import threading

    store = MemoryStore()
    w = job(store, tmp_path, {"a": [0], "b": [1]})
    entered, release = threading.Event(), threading.Event()
    real_set = store.set

    def slow_set(key: str, value: bytes) -> None:  # the watcher's round, held at the store
        if threading.current_thread().name == "lifecycle-rank-watch":
            entered.set()
            release.wait(5)
        real_set(key, value)

    store.set = slow_set  # type: ignore[method-assign]
    w[0].start()
    watcher = w[0]._thread
    assert watcher is not None and entered.wait(5)
    threading.Timer(0.3, release.set).start()
    w[0].stop()
    assert not watcher.is_alive()


def test_a_leader_ticked_more_often_than_its_round_talks_to_the_store_once_a_round(tmp_path: Path) -> None:
    store = Counting()
    w = job(store, tmp_path, {"a": [0], "b": [1]})
    store.ops.clear()
    for step in range(100):  # 1 s of ticks every 10 ms; a round is 0.2 s (two polls)
        w[0].tick(100.0 + step * 0.01)
    assert w[0].interval_s == 0.2 and 4 <= store.ops["multi_get"] <= 6 and store.ops["set"] == store.ops["multi_get"]


def test_a_leader_whose_store_host_is_gone_stops_without_asking_it_again(tmp_path: Path) -> None:
    """A store operation on a dead host can wait out the store's timeout: stop() makes none."""
    store = Counting()
    w = job(store, tmp_path, {"a": [0], "b": [1]})
    real_set, real_multi_get = store.set, store.multi_get

    def closed(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Connection was likely closed by the other end (Broken pipe)")

    store.set = closed  # type: ignore[method-assign]
    store.multi_get = closed  # type: ignore[method-assign]
    for step in range(200):  # 20 s of polls: past lost_s and stale_s
        w[0].tick(100.0 + step * 0.1)
    assert w[0]._store_gone
    store.set, store.multi_get = real_set, real_multi_get  # type: ignore[method-assign]
    store.ops.clear()
    w[0].stop()
    assert store.ops["set"] == 0 and store.data.get("beat/1") != b"done"


def test_a_board_directory_of_another_user_is_refused_and_each_rank_talks_to_the_store(tmp_path: Path) -> None:
    root = tmp_path / f"megatron-lifecycle-{os.getuid()}"
    root.mkdir(mode=0o700)
    try:
        os.chown(root, os.getuid() + 1, -1)  # planted by another user
    except PermissionError:
        pytest.skip("only root can give a directory to another user here")
    w = job(MemoryStore(), tmp_path, {"a": [0, 1]})
    assert all(watch._node.board is None and watch.leader for watch in w.values())
    assert list(root.iterdir()) == []  # nothing written into it


def test_a_lost_node_once_reported_costs_no_more_than_two_operations_a_round(tmp_path: Path) -> None:
    store = Counting()
    w = job(store, tmp_path, {"a": [0], "b": [1]}, timeout_s=24.0)
    w[1]._stop.set()  # node b's leader never beats again
    for now in (100.0, 100.0 + w[0].stale_s + 1):
        w[0].tick(now)
    assert first(store) is not None
    store.ops.clear()
    for step in range(1, 11):
        w[0].tick(200.0 + step)
    assert dict(store.ops) == {"set": 10, "multi_get": 10}


def test_a_watch_without_a_node_reads_the_store_at_its_first_tick_not_a_round_later() -> None:
    """Joined to no node (no check-in: a watch of `first` only), the watch has no round of its own:
    it reads the store at its first tick, a poll in, then at every tick."""
    store = Counting()
    watch = RankWatch(store, rank=0, world_size=2, settings=WatchSettings(timeout_s=24.0, poll_s=0.1))
    first = watch.first_tick(100.0)
    assert first == pytest.approx(100.1)
    watch.tick(first)
    assert sum(store.ops.values()) > 0, "its first tick read nothing of the store"


class _Stop:
    """The watcher's stop event, recording how long each wait would sleep; set after `waits` waits."""

    def __init__(self, waits: int) -> None:
        self.timeouts: list[float] = []
        self.waits = waits

    def wait(self, timeout: float) -> bool:
        self.timeouts.append(timeout)
        return len(self.timeouts) > self.waits

    def set(self) -> None:
        self.waits = 0


def test_the_watcher_sleeps_only_until_its_next_tick_and_not_at_all_when_one_is_due(tmp_path: Path) -> None:
    w = job(MemoryStore(), tmp_path, {"a": [0, 1]})
    for rank, due_at_once in ((0, True), (1, False)):  # the leader's round (phase 0) is due at once
        stop = _Stop(waits=3)
        w[rank]._stop = stop  # type: ignore[assignment]  # the thread's loop, run here
        w[rank]._watch()
        assert len(stop.timeouts) == 4 and all(0.0 <= t <= w[rank].poll_s + 1e-6 for t in stop.timeouts), stop.timeouts
        assert (stop.timeouts[0] < 0.01) is due_at_once, stop.timeouts
