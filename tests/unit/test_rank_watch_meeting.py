"""The ranks of a node check in through the first of them (lifecycle/rankwatch/_meeting.py): the store sees a
few operations a node, and every promise of the check-in holds: the node's ranks, leader and board are what
each rank checking itself in finds, a missing rank is named by every rank of the node, a rank of another
world is refused by every rank of both, the store host's loss and a leader killed outright are named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from lifecycle.errors import DistributedError
from lifecycle.rankwatch import RankWatch, WatchSettings, World
from tests.unit.test_rank_watch_nodes import Counting, Ctx
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
