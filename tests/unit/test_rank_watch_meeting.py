"""The ranks of a node check in through the first of them (lifecycle/rankwatch/_meeting.py): the store sees a
few operations a node, and every promise of the check-in holds: the node's ranks, leader and board are what
each rank checking itself in finds, a missing rank is named by every rank of the node, a rank of another
world is refused by every rank of both, the store host's loss and a leader killed outright are named."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from lifecycle.errors import DistributedError
from lifecycle.rankwatch import RankWatch, WatchSettings, World, launch_key, local_size
from lifecycle.testing import Board, Meeting, board_root, owner, sweep
from tests.unit.test_rank_watch_nodes import Counting, Ctx, dead_pid
from tests.unit.test_rank_watch_verdicts import MemoryStore

ROOT = Path(__file__).resolve().parents[2]


def _watch(store: MemoryStore, tmp_path: Path, rank: int, size: int, node: str, **kw: object) -> RankWatch:
    settings = kw.pop("settings", None) or WatchSettings(timeout_s=24.0, poll_s=0.1)
    return RankWatch(
        store,
        rank=rank,
        world_size=size,
        settings=settings,  # type: ignore[arg-type]
        node=node,
        board_dir=str(tmp_path),
        meeting=str(kw.pop("meeting", "job")),
        **kw,  # type: ignore[arg-type]
    )


def met(store: MemoryStore, tmp_path: Path, layout: dict[str, list[int]]) -> dict[int, RankWatch]:
    """Every rank of `layout` (node -> its ranks) arrived at its node's meeting, checked in by its leader, joined."""
    world = sum(len(ranks) for ranks in layout.values())
    watches = {
        rank: _watch(store, tmp_path, rank, world, node, local_size=len(ranks))
        for node, ranks in layout.items()
        for rank in ranks
    }
    for watch in watches.values():
        watch.checkin.register()
    for watch in watches.values():
        watch.checkin.report()
    for watch in watches.values():
        watch.checkin.await_all()
        watch.join_node()
    return watches


def test_a_node_checks_in_with_a_few_store_operations_not_a_few_a_rank(tmp_path: Path) -> None:
    store = Counting()
    met(store, tmp_path, {f"n{i}": list(range(8 * i, 8 * i + 8)) for i in range(4)})
    # a node: its count, its index, one multi_set, the arrivals; the wait; its entries (2); the last node's 2
    assert sum(store.ops.values()) == 4 * (4 + 1 + 2) + 2
    assert store.ops["multi_set"] == 4 and store.data["arrived"] == b"32" and store.data["all_arrived"] == b"1"
    assert all(f"checkin/{rank}" in store.data for rank in range(32)), "the missing-rank search reads these"


def test_a_node_met_is_the_node_each_rank_finds_when_it_checks_itself_in(tmp_path: Path) -> None:
    store = MemoryStore()
    w = met(store, tmp_path, {"a": [0, 1, 2], "b": [3, 4]})
    assert [r for r, watch in w.items() if watch.leader] == [0, 3]
    assert all(watch.nodes == 2 for watch in w.values())
    assert w[1]._node.board is not None and w[0]._node.board is not None and w[3]._node.board is not None
    assert w[1]._node.board.path == w[2]._node.board.path == w[0]._node.board.path != w[3]._node.board.path
    assert w[1]._node.peers == {0: os.getpid(), 2: os.getpid()} and w[4]._node.peers == {3: os.getpid()}
    assert w[0]._ring is not None and w[3]._ring is not None and w[1]._ring is None
    assert not any(p.name.startswith("checkin-") for p in (tmp_path / f"megatron-lifecycle-{os.getuid()}").iterdir())


def _check_in(watch: RankWatch, ctx: Ctx, errors: dict[int, BaseException]) -> None:
    try:
        watch.check_in(ctx)  # type: ignore[arg-type]
    except BaseException as exc:
        errors[watch.rank] = exc


def _together(watches: list[RankWatch]) -> tuple[dict[int, BaseException], dict[int, Ctx]]:
    errors: dict[int, BaseException] = {}
    ctxs = {w.rank: Ctx() for w in watches}
    threads = [threading.Thread(target=_check_in, args=(w, ctxs[w.rank], errors)) for w in watches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return errors, ctxs


def test_a_missing_rank_is_named_by_every_rank_of_a_node_that_met(tmp_path: Path) -> None:
    store = MemoryStore()
    settings = WatchSettings(timeout_s=1.0, poll_s=0.1)
    watches = [_watch(store, tmp_path, rank, 4, "a", settings=settings, interruptible=True) for rank in (0, 1, 2)]
    errors, ctxs = _together(watches)  # rank 3 never comes
    assert sorted(errors) == [0, 1, 2]
    for rank in (0, 1, 2):
        assert isinstance(errors[rank], DistributedError) and "missing: rank 3" in str(errors[rank]), errors[rank]
        timeouts = [fields for event, fields in ctxs[rank].emitted if event == "state_timeout"]
        assert [t["missing"] for t in timeouts] == [[3]], ctxs[rank].emitted


def test_a_rank_of_another_world_is_refused_by_every_rank_that_met(tmp_path: Path) -> None:
    store = MemoryStore()

    def world(rank: int, size: int) -> World:
        return World(job="j", world_size=size, endpoint="e", generation=0, rank=rank)

    first = [_watch(store, tmp_path, r, 2, "a", world=world(r, 2), local_size=2) for r in (0, 1)]
    for w in first:
        w.checkin.register()
    first[0].checkin.report()
    other = [_watch(store, tmp_path, r, 3, "b", world=world(r, 3), meeting="other", local_size=2) for r in (1, 2)]
    errors, _ = _together(other)
    assert sorted(errors) == [1, 2] and all("two worlds met" in str(e) for e in errors.values()), errors
    assert all(getattr(e, "field", None) == "parallel.world_size" for e in errors.values())


def test_the_store_hosts_loss_is_named_by_every_rank_that_met(tmp_path: Path) -> None:
    store = MemoryStore()
    store.fail_with = RuntimeError("Failed to recv, got 0 bytes. Connection was likely closed.")
    watches = [_watch(store, tmp_path, rank, 4, "a", local_size=2) for rank in (1, 2)]
    errors, ctxs = _together(watches)
    assert sorted(errors) == [1, 2]
    for rank in (1, 2):
        assert "rank 0, the rendezvous store's host, was lost" in str(errors[rank]), errors[rank]
        assert [f["peer_rank"] for e, f in ctxs[rank].emitted if e == "peer_failed"] == [0]


KEY = "00112233445566778899aabb"


def test_the_launchers_count_of_a_nodes_ranks_is_read_from_torchrun_open_mpi_or_mpich(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert local_size({"LOCAL_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}) == 8
    assert local_size({"OMPI_COMM_WORLD_LOCAL_SIZE": "4", "MPI_LOCALNRANKS": "2"}) == 4
    assert local_size({"MPI_LOCALNRANKS": "1"}) == 1
    assert local_size({"LOCAL_WORLD_SIZE": "0", "MPI_LOCALNRANKS": "2"}) == 2  # no count, the next launcher's
    assert local_size({"LOCAL_WORLD_SIZE": "", "OMPI_COMM_WORLD_LOCAL_SIZE": "-4"}) is None
    assert local_size({"LOCAL_WORLD_SIZE": "eight"}) is None and local_size({}) is None
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    assert local_size() == 3  # the process's own environment by default


def test_each_launch_on_a_node_meets_in_a_private_directory_of_its_own_that_the_sweep_knows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    key = launch_key("job", "a", 0)
    restarted = launch_key("job", "a", 0, environ={"TORCHELASTIC_RESTART_COUNT": "1"})
    others = {launch_key("job", "b", 0), launch_key("job", "a", 1), launch_key("other", "a", 0), restarted}
    assert launch_key("job", "a", 0) == key and key not in others and len(others) == 4
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert launch_key("job", "a", 0) == restarted  # torchrun's restart count, from the environment

    root = board_root(str(tmp_path))
    meeting = Meeting(root, key, 0, 1)
    assert stat.S_IMODE(meeting.path.stat().st_mode) == 0o700
    board = Board(root, meeting.nonce, 0)  # the board its leader names
    (meeting.path / "rank-0").write_text(str(dead_pid()))  # its rank killed: both are left behind
    (board.path / "beat-0").write_text(f"DISTRIBUTED\n{dead_pid()}::{owner().split(':', 2)[2]}\n")
    assert sweep(root) == 2 and not meeting.path.exists() and not board.path.exists()


def test_the_leader_checks_in_at_once_when_the_launchers_count_arrived_else_a_tenth_of_a_second_after_the_last(
    tmp_path: Path,
) -> None:
    root, pid = board_root(str(tmp_path)), os.getpid()
    leader = Meeting(root, KEY, 0, 3)
    assert leader.leads and leader.due(1000.0) == {}  # 1 of the 3 the launcher counts: more may come
    assert not Meeting(root, KEY, 1, 3).leads
    assert leader.due(1000.05) == {} and leader.due(1000.14) == {}  # the wait starts again at each arrival
    batch = leader.due(1000.16)
    assert list(batch) == [0, 1] and set(batch.values()) == {pid}  # the leader first
    leader.pushed |= batch.keys()
    assert leader.due(1001.0) == {}  # nothing new
    Meeting(root, KEY, 2, 3)
    assert leader.due(1001.0) == {2: pid}  # all 3 in: no wait

    for first in range(4):  # no launcher's count: 0.1 s without an arrival decides; the leader first, whoever
        arrivals = [Meeting(root, f"{first:024x}", rank) for rank in (first, *(r for r in range(6) if r != first))]
        assert arrivals[0].leads and arrivals[0].due(0.0) == {}
        batch = arrivals[0].due(0.1)
        assert next(iter(batch)) == first and sorted(batch) == list(range(6))


def test_a_ranks_latest_arrival_is_the_one_its_leader_checks_in(tmp_path: Path) -> None:
    root = board_root(str(tmp_path))
    leader = Meeting(root, KEY, 0)
    (leader.path / "rank-1").write_text(f"{dead_pid()}::elsewhere")  # an earlier process of rank 1
    Meeting(root, KEY, 1)
    assert leader.arrived() == {0: os.getpid(), 1: os.getpid()}


def test_the_leaders_first_word_is_the_one_every_rank_hears(tmp_path: Path) -> None:
    root = board_root(str(tmp_path))
    leader, follower = Meeting(root, KEY, 0), Meeting(root, KEY, 1)
    leader.post({"failed": "timeout", "missing": [3]})
    leader.post({"entries": [], "nodes": 1})
    assert follower.await_result(5.0) == leader.result() == {"failed": "timeout", "missing": [3]}


def test_a_rank_hears_its_leader_gone_at_once_or_silent_at_its_deadline_unless_the_word_came(tmp_path: Path) -> None:
    root = board_root(str(tmp_path))
    gone = root / "checkin-0000000000000000000000aa"
    gone.mkdir(mode=0o700)
    (gone / "lead").write_text(f"0:{dead_pid()}:00ff00ff00ff00ff")  # its leader's process ended
    assert Meeting(root, "0000000000000000000000aa", 1).await_result(60.0) == {"failed": "leader_gone"}
    (gone / "result").write_text('{"entries": ["0:1"], "nodes": 1}')  # its word came before it ended
    assert Meeting(root, "0000000000000000000000aa", 2).await_result(60.0) == {"entries": ["0:1"], "nodes": 1}

    Meeting(root, KEY, 0)  # this process leads, and says nothing
    assert Meeting(root, KEY, 1).await_result(0.2) == {"failed": "silent"}


def test_a_rank_waiting_for_its_leaders_word_looks_after_1_ms_then_doubling_to_every_50_ms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = board_root(str(tmp_path))
    leader, follower = Meeting(root, KEY, 0), Meeting(root, KEY, 1)
    pauses: list[float] = []

    def pause(seconds: float) -> None:  # no real wait: the word comes after the ninth look
        pauses.append(seconds)
        if len(pauses) == 9:
            leader.post({"entries": [], "nodes": 1})

    monkeypatch.setattr(time, "sleep", pause)
    assert follower.await_result(60.0) == {"entries": [], "nodes": 1}
    assert pauses == pytest.approx([0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.05, 0.05, 0.05])


def test_a_leader_killed_before_it_checked_its_node_in_is_named_by_the_others(tmp_path: Path) -> None:
    def rank(number: int) -> dict[str, Any]:  # each a child of this process: one launch, one meeting
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-c", _RANK, str(tmp_path), str(number)], env=env, capture_output=True)
        assert done.returncode == 0, done.stderr.decode()
        out: dict[str, Any] = json.loads(done.stdout)
        return out

    leader = rank(0)  # arrives first, so it leads; then its process ends before it checked anyone in
    assert leader["leads"] is True
    follower = rank(1)
    assert follower["leads"] is False
    assert "rank 0, which checks in the ranks of rank 1's node, did not" in follower["error"], follower
    lost = [fields for event, fields in follower["emitted"] if event == "peer_failed"]
    assert [(f["peer_rank"], f["peer_kind"]) for f in lost] == [(0, "lost")]
    assert f"pid {leader['pid']}" in lost[0]["error"]
    assert '"rank":0,' in follower["first"], "the other nodes learn it from the store"


def test_a_leader_alive_but_silent_in_the_check_in_is_named_by_the_others_after_its_deadline(tmp_path: Path) -> None:
    """The leader arrived first, then stood still (SIGSTOP) before it checked its node in: the others wait
    the check-in's deadline and a heartbeat's silence (1 s + 5 s here), then name it, not themselves."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    script = [sys.executable, "-c", _RANK, str(tmp_path)]
    leader = subprocess.Popen([*script, "0", "1", "stop"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert leader.stdout is not None and leader.stdout.readline() == "registered\n"
        done = subprocess.run([*script, "1", "1", ""], env=env, capture_output=True, timeout=60)
    finally:
        leader.kill()
        leader.communicate()
    assert done.returncode == 0, done.stderr.decode()
    follower = json.loads(done.stdout)
    assert follower["leads"] is False
    assert "rank 0, which checks in the ranks of rank 1's node, did not" in follower["error"], follower
    assert "(stopped or hung)" in follower["error"], follower
    lost = [fields for event, fields in follower["emitted"] if event == "peer_failed"]
    assert [(f["peer_rank"], f["peer_kind"]) for f in lost] == [(0, "lost")], follower["emitted"]
    assert f"pid {leader.pid}" in lost[0]["error"] and "stopped or hung" in lost[0]["error"]
    assert '"rank":0,' in follower["first"], "the other nodes learn it from the store"


_RANK = """
import json, os, sys
from lifecycle.rankwatch import RankWatch, WatchSettings
from lifecycle.testing import fields_written

class Store(dict):
    def set(self, key, value): self[key] = value
    def compare_set(self, key, expected, desired):
        if self.get(key, b"") == expected: self[key] = desired
        return self[key]

store, emitted, error = Store(), [], None
timeout_s, then = (float(sys.argv[3]), sys.argv[4]) if len(sys.argv) > 3 else (24.0, "")
watch = RankWatch(store, rank=int(sys.argv[2]), world_size=2, settings=WatchSettings(timeout_s=timeout_s), node="a",
                  board_dir=sys.argv[1], meeting="job")
ctx = type("Ctx", (), {"emit": lambda record: emitted.append(fields_written(record)),
                       "trigger": type("T", (), {"value": "init_distributed"})})
if watch.rank == 0:
    watch.checkin.register()
    if then == "stop":  # alive, and silent: stopped before it checked its node in
        print("registered", flush=True)
        os.kill(os.getpid(), 19)
else:
    try:
        watch.check_in(ctx)
    except Exception as exc:
        error = str(exc)
leads = watch.checkin.meeting is not None and watch.checkin.meeting.leads
first = store.get("first", b"").decode()
print(json.dumps({"pid": os.getpid(), "leads": leads, "error": error, "emitted": emitted, "first": first}))
"""
