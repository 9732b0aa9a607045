"""The watcher's verdicts, decided on a store in memory (no torch): which peer it names and when, for a
rank killed outright on this host (a real dead process), one that finished, the store's host gone
(a closed connection, or only silence), and a lifecycle that failed outside a watched phase."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lifecycle.errors import DistributedError
from lifecycle.log.records import Record
from lifecycle.rankwatch import EXIT_CODE, Failure, RankWatch, WatchSettings
from lifecycle.testing import fields_written, process_alive, store_closed


class MemoryStore:
    """The part of torch's Store the watch uses; `fail_with` makes every operation raise it."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.fail_with: Exception | None = None

    def _ok(self) -> None:
        if self.fail_with is not None:
            raise self.fail_with

    def add(self, key: str, amount: int) -> int:
        self._ok()
        value = int(self.data.get(key, b"0")) + amount
        self.data[key] = str(value).encode()
        return value

    def set(self, key: str, value: bytes) -> None:
        self._ok()
        self.data[key] = value

    def get(self, key: str) -> bytes:
        self._ok()
        return self.data[key]

    def check(self, keys: list[str]) -> bool:
        self._ok()
        return all(k in self.data for k in keys)

    def multi_get(self, keys: list[str]) -> list[bytes]:
        self._ok()
        return [self.data[k] for k in keys]

    def multi_set(self, keys: list[str], values: list[bytes]) -> None:
        self._ok()
        self.data.update(zip(keys, values, strict=True))

    def compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        self._ok()
        if self.data.get(key, b"") == expected:
            self.data[key] = desired
        return self.data[key]

    def wait(self, keys: list[str], _timeout: Any = None) -> None:
        self._ok()


class Emitted(list[tuple[str, dict[str, Any]]]):
    def __call__(self, record: Record) -> None:
        self.append(fields_written(record))


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _watch(store: MemoryStore, rank: int, exits: list[int], *, host: int | None = 0) -> RankWatch:
    return RankWatch(
        store,
        rank=rank,
        world_size=2,
        settings=WatchSettings(timeout_s=600.0, poll_s=0.05, grace_s=3.0),
        store_host=host,
        exit_process=exits.append,
    )


def _until(what: Any, limit_s: float = 10.0) -> None:
    deadline = time.monotonic() + limit_s
    while not what() and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_zombie_or_reaped_process_is_not_alive_and_a_running_one_is() -> None:
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    _until(lambda: not process_alive(zombie.pid))
    assert not process_alive(zombie.pid)  # exited, not yet reaped by its parent: a zombie
    zombie.wait()
    assert not process_alive(zombie.pid)
    assert process_alive(os.getpid())


def _node_of_two(store: MemoryStore, exits: list[int], board: Path) -> tuple[RankWatch, RankWatch]:
    """Rank 0, which leads its node and whose watcher thread runs, and rank 1 on the same node."""
    watch = RankWatch(
        store,
        rank=0,
        world_size=2,
        settings=WatchSettings(timeout_s=600.0, poll_s=0.05),
        exit_process=exits.append,
        board_dir=str(board),
    )
    peer = RankWatch(store, rank=1, world_size=2, settings=WatchSettings(timeout_s=600.0), board_dir=str(board))
    for one in (watch, peer):
        one.checkin.register()
    for one in (watch, peer):
        one.check_in(_Ctx())
    return watch, peer


def test_a_peer_on_this_host_killed_outright_is_published_as_lost_and_ends_a_blocked_step(tmp_path: Path) -> None:
    store, exits, emitted = MemoryStore(), [], Emitted()
    watch, peer = _node_of_two(store, exits, tmp_path)
    with peer.watching(Emitted(), "step 2", "CALLBACKS_BOUND", deadline=False):
        peer.tick(time.monotonic())  # what its board says it does
    watch._node.peers[1] = _dead_pid()  # then it is killed outright
    watch.start()
    started = time.monotonic()
    with watch.watching(emitted, "step 2", "CALLBACKS_BOUND", deadline=False):
        _until(lambda: bool(exits))
    watch.stop()
    assert exits == [EXIT_CODE] and time.monotonic() - started < 5  # the short grace of a lost peer
    first = Failure.decode(store.get("first"))
    assert (first.rank, first.state, first.kind) == (1, "CALLBACKS_BOUND", "lost")
    assert "is gone without a failure record" in first.error
    assert [(e, f["peer_rank"]) for e, f in emitted] == [("peer_failed", 1)]


def test_a_peer_that_said_done_before_its_process_ended_is_not_lost(tmp_path: Path) -> None:
    store, exits = MemoryStore(), []
    watch, peer = _node_of_two(store, exits, tmp_path)
    peer.tick(time.monotonic())
    peer.stop()
    watch._node.peers[1] = _dead_pid()
    watch.start()
    time.sleep(0.5)
    watch.stop()
    assert store.data["first"] == b"" and watch.peer_failure() is None and exits == []


def test_a_store_whose_host_closed_the_connection_names_the_host_within_a_second_or_two() -> None:
    store, exits, emitted = MemoryStore(), [], Emitted()
    watch = _watch(store, 1, exits)
    watch.start()
    time.sleep(0.2)
    store.fail_with = RuntimeError("Failed to recv, got 0 bytes. Connection was likely closed.")
    lost_at = time.monotonic()
    with watch.watching(emitted, "shutdown", "SHUT_DOWN"):
        _until(lambda: bool(exits))
    watch.stop()
    assert exits == [EXIT_CODE] and time.monotonic() - lost_at < watch.lost_s + 1.0 + 2.0
    [(event, fields)] = emitted
    assert (event, fields["peer_rank"]) == ("peer_failed", 0)
    assert "the rendezvous store it hosts stopped answering" in fields["error"]


def test_a_slow_store_is_not_taken_for_a_dead_host_before_stale_s() -> None:
    store, exits = MemoryStore(), []
    watch = _watch(store, 1, exits)
    watch.start()
    store.fail_with = RuntimeError("Socket Timeout")
    time.sleep(2 * watch.lost_s)
    noticed = watch.peer_failure()
    watch.stop()
    assert noticed is None and exits == [] and watch.stale_s >= 5.0
    assert not store_closed(RuntimeError("Socket Timeout"))


def test_under_an_agent_store_no_rank_is_blamed_for_the_store() -> None:
    store, exits = MemoryStore(), []
    watch = _watch(store, 1, exits, host=None)
    watch.start()
    store.fail_with = RuntimeError("Broken pipe")
    time.sleep(2 * watch.lost_s + 0.3)
    watch.stop()
    assert watch.peer_failure() is None


@pytest.mark.parametrize(("peer_first", "published"), [(False, True), (True, False)])
def test_a_lifecycle_failed_outside_a_phase_publishes_unless_a_peer_failed_first(
    peer_first: bool, published: bool
) -> None:
    store = MemoryStore()
    if peer_first:
        store.set("first", Failure(rank=0, state="CALLBACKS_BOUND", error="x", kind="exception").encode())
    watch = _watch(store, 1, [])
    watch.mark_failed("CALLBACKS_BOUND", "RuntimeError: in the user's loop")
    assert watch.failed
    assert ("failure/1" in store.data) is published
    first = Failure.decode(store.get("first"))
    assert first.rank == (1 if published else 0)


def test_the_verdict_wait_for_a_rank_killed_outright_is_under_10_s_at_any_deadline() -> None:
    for timeout_s in (1.0, 20.0, 600.0, 86400.0):
        watch = RankWatch(MemoryStore(), rank=0, world_size=2, settings=WatchSettings(timeout_s=timeout_s))
        assert 5.0 <= watch.stale_s <= 8.0 and watch.lost_s <= 1.0


class _Ctx:
    """The two things `check_in` uses of a PhaseContext."""

    class trigger:  # mimics Trigger.INIT_DISTRIBUTED
        value = "init_distributed"

    def emit(self, record: Record) -> None:
        raise AssertionError(f"unexpected {record}")


class RankShouldRestart(BaseException):
    """Stands for nvidia-resiliency-ext's restart signal: a BaseException the wrapper raises in a rank."""


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (RankShouldRestart("Interruption.EXCEPTION on ranks={1}"), RankShouldRestart),
        (RuntimeError("gloo: Connection closed by peer"), DistributedError),
    ],
)
def test_a_wrappers_restart_signal_passes_through_while_a_peers_failure_makes_an_error_a_victims(
    raised: BaseException, expected: type[BaseException]
) -> None:
    store = MemoryStore()
    failure = Failure(rank=1, state="CALLBACKS_BOUND", error="RuntimeError: injected", kind="exception")
    store.set("first", failure.encode())
    watch = _watch(store, 0, [])
    with pytest.raises(expected) as caught, watch.watching(Emitted(), "step 3", "CALLBACKS_BOUND", deadline=False):
        raise raised
    assert (caught.value is raised) is (expected is RankShouldRestart)
