"""The watcher's decisions one by one (lifecycle.rankwatch), on a store in memory and with the
clock passed in: which peer is lost and which finished, when a heartbeat stood still long enough,
when the store's host is gone, when the main thread is ended, and what a failure in a watched phase
publishes and raises. No thread and no torch; tests/unit/test_rank_watch_verdicts.py runs the same
verdicts through the watcher thread, and tests/integration the 2-rank runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Any

import pytest

from lifecycle.config import RunConfig
from lifecycle.errors import DistributedError
from lifecycle.log.records import Record
from lifecycle.rankwatch import EXIT_CODE, Failure, RankWatch, WatchSettings, mark_failed, watched, watched_step
from lifecycle.testing import ActiveWork, kind_of, rank_list
from tests.unit.test_rank_watch_verdicts import Emitted, MemoryStore

CLOSED = RuntimeError("Failed to recv, got 0 bytes. Connection was likely closed.")


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.fixture(scope="module")
def gone() -> int:
    return dead_pid()


def make(
    store: MemoryStore | None = None,
    *,
    rank: int = 0,
    world: int = 3,
    timeout_s: float = 24.0,
    host: int | None = 0,
    exits: list[int] | None = None,
) -> RankWatch:
    return RankWatch(
        MemoryStore() if store is None else store,
        rank=rank,
        world_size=world,
        settings=WatchSettings(timeout_s=timeout_s, poll_s=0.1, grace_s=3.0),
        store_host=host,
        exit_process=(exits if exits is not None else []).append,
    )


def failure(rank: int, kind: str = "exception", state: str = "DISTRIBUTED") -> Failure:
    return Failure(rank=rank, state=state, error=f"boom on {rank}", kind=kind)


def first(store: MemoryStore) -> Failure | None:
    return Failure.decode(store.data["first"]) if "first" in store.data else None


class Ctx:
    def __init__(self, watch: RankWatch | None = None) -> None:
        self.emitted = Emitted()
        self.trigger = SimpleNamespace(value="init_distributed")
        self.runtime = SimpleNamespace(rank_watch=watch)

    def emit(self, record: Record) -> None:
        self.emitted(record)


# -- timing and naming ---------------------------------------------------------------------------------
def test_the_verdict_times_follow_the_deadline_and_the_poll_as_documented() -> None:
    store = MemoryStore()
    assert [
        RankWatch(store, rank=0, world_size=2, settings=WatchSettings(timeout_s=t)).stale_s for t in (1.0, 24.0, 100.0)
    ] == [5.0, 6.0, 8.0]
    default = RankWatch(store, rank=0, world_size=2, settings=WatchSettings(timeout_s=60.0))
    assert (default.poll_s, default.grace_s, default.lost_s, default.store_host) == (0.5, 3.0, 1.0, 0)
    assert RankWatch(store, rank=0, world_size=2, settings=WatchSettings(timeout_s=60.0, poll_s=2.0)).lost_s == 4.0
    assert RankWatch(store, rank=0, world_size=2, settings=WatchSettings(timeout_s=60.0, poll_s=0.1)).lost_s == 1.0


def test_a_runs_watch_takes_its_deadline_from_startup_timeout_s_and_the_rest_from_the_watch_settings() -> None:
    config = RunConfig.from_dict({"startup": {"timeout_s": 24}})
    watch = RankWatch(MemoryStore(), rank=0, world_size=2, settings=WatchSettings.of(config))
    assert (watch.timeout_s, watch.stale_s, watch.poll_s, watch.grace_s) == (24.0, 6.0, 0.5, 3.0)
    assert WatchSettings.of(RunConfig()).timeout_s == 600.0  # startup.timeout_s's default


def test_the_watcher_ends_a_process_with_ex_tempfail_as_documented() -> None:
    assert EXIT_CODE == os.EX_TEMPFAIL == 75  # docs/failures.md: schedulers may retry a job on it


def test_failures_are_immutable_keyword_only_values() -> None:
    with pytest.raises(TypeError):
        Failure(1, "DISTRIBUTED", "x", "lost")  # type: ignore[misc]
    with pytest.raises(AttributeError):
        failure(1).rank = 2  # type: ignore[misc]
    assert len({failure(1), failure(1)}) == 1


def test_ranks_are_listed_in_words() -> None:
    assert (rank_list([1]), rank_list([1, 3]), rank_list([])) == ("rank 1", "ranks 1, 3", "ranks ")


def test_a_failure_goes_through_the_store_unchanged() -> None:
    one = failure(4, "lost", "MODEL_BUILT")
    assert Failure.decode(one.encode()) == one
    assert Failure.decode(b'{"rank": "2", "state": 5, "error": null, "kind": "x"}') == Failure(
        rank=2, state="5", error="None", kind="x"
    )


# -- check-in ------------------------------------------------------------------------------------------


def test_a_rank_that_is_not_the_last_does_not_open_the_gate() -> None:
    store = MemoryStore()
    store.set("arrived", b"1")
    make(store, rank=1).check_in(Ctx())  # type: ignore[arg-type]
    assert "all_arrived" not in store.data and store.data["arrived"] == b"2"


class TimingOut(MemoryStore):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def wait(self, keys: list[str], _timeout: Any = None) -> None:
        raise self.error


def test_a_rendezvous_that_times_out_names_the_missing_ranks_logs_and_publishes_it() -> None:
    store = TimingOut(TimeoutError("wait timed out"))
    store.set("checkin/0", b"1")
    ctx = Ctx()
    with pytest.raises(DistributedError) as caught:
        make(store, rank=2, world=4, timeout_s=7.5).check_in(ctx)  # type: ignore[arg-type]
    assert str(caught.value) == (
        "rendezvous timed out after 7.5 s: 2 of 4 ranks arrived; missing: ranks 1, 3. "
        "Start the missing ranks, or raise startup.timeout_s if they are slow to start"
    )
    assert caught.value.field == "startup.timeout_s"
    assert ctx.emitted == [
        ("state_timeout", {"state": "DISTRIBUTED", "trigger": "init_distributed", "timeout_s": 7.5, "missing": [1, 3]})
    ]
    assert first(store) == Failure(
        rank=2, state="DISTRIBUTED", error="rendezvous timed out; missing: ranks 1, 3", kind="timeout"
    )


def test_a_rendezvous_that_times_out_names_rank_0_when_it_is_the_one_missing() -> None:
    store = TimingOut(TimeoutError("wait timed out"))
    store.set("checkin/2", b"1")
    with pytest.raises(DistributedError) as caught:
        make(store, rank=1, world=3, timeout_s=7.5).check_in(Ctx())  # type: ignore[arg-type]
    assert "2 of 3 ranks arrived; missing: rank 0. " in str(caught.value)


def test_a_rendezvous_that_fails_otherwise_is_not_called_a_timeout() -> None:
    store = TimingOut(ValueError("bad key"))
    ctx = Ctx()
    with pytest.raises(ValueError, match="bad key"):
        make(store).check_in(ctx)  # type: ignore[arg-type]
    assert ctx.emitted == [] and first(store) is None


def test_the_store_host_lost_during_the_check_in_is_named_by_a_waiting_rank_as_the_cause() -> None:
    """Rank 0 hosts the store (no agent) and is killed while rank 1 waits for every rank: its closed
    connection names rank 0 (`peer_failed`), not rank 1's own error (the verdict corpus's
    `kill_rank_0_in_rendezvous`)."""
    store, ctx = TimingOut(CLOSED), Ctx()
    with pytest.raises(DistributedError) as caught:
        make(store, rank=1, world=2).check_in(ctx)  # type: ignore[arg-type]
    assert str(caught.value).startswith(
        "rank 0, the rendezvous store's host, was lost while rank 1 waited for every rank to check in "
    )
    assert caught.value.field == "startup" and caught.value.__cause__ is CLOSED
    [(event, fields)] = ctx.emitted
    assert (event, fields["peer_rank"], fields["peer_state"]) == ("peer_failed", 0, "unknown")
    assert "closed the connection during the check-in" in str(fields["error"])


def test_a_closed_store_at_the_check_in_blames_no_rank_under_an_agent_or_on_the_host_itself() -> None:
    for rank, host in ((1, None), (0, 0)):
        ctx = Ctx()
        with pytest.raises(RuntimeError, match="Connection was likely closed"):
            make(TimingOut(CLOSED), rank=rank, world=2, host=host).check_in(ctx)  # type: ignore[arg-type]
        assert ctx.emitted == []


class Polled(MemoryStore):
    """A store that an interruptible check-in must poll (`check`), never wait in; the last rank
    arrives at the `arrives_at`-th poll (never: None)."""

    def __init__(self, arrives_at: int | None) -> None:
        super().__init__()
        self.arrives_at, self.polls = arrives_at, 0

    def check(self, keys: list[str]) -> bool:
        if keys == ["all_arrived"]:
            self.polls += 1
            if self.polls == self.arrives_at:
                self.set("all_arrived", b"1")
        return super().check(keys)

    def wait(self, keys: list[str], _timeout: Any = None) -> None:
        raise AssertionError("an interruptible check-in waited in the store")


class Clock:
    """`time.monotonic` and `time.sleep` for the check-in: each sleep moves the clock on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now, self.sleeps = 1000.0, list[float]()
        monkeypatch.setattr("time.monotonic", lambda: self.now)
        monkeypatch.setattr("time.sleep", self.sleep)

    def sleep(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")  # as time.sleep
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


def interruptible(store: MemoryStore, *, timeout_s: float = 24.0) -> RankWatch:
    return RankWatch(
        store, rank=0, world_size=2, settings=WatchSettings(timeout_s=timeout_s, poll_s=0.5), interruptible=True
    )


def test_an_interruptible_check_in_polls_from_1_ms_doubling_to_a_tenth_of_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under a restart wrapper the restart request lands between bytecodes: never one long wait."""
    clock, store = Clock(monkeypatch), Polled(arrives_at=10)
    watch = interruptible(store)
    assert watch.checkin.interruptible and not make().checkin.interruptible
    watch.check_in(Ctx())  # type: ignore[arg-type]
    assert store.polls == 10
    assert clock.sleeps == [0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.1, 0.1]


def test_an_interruptible_check_in_that_arrives_at_once_does_not_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    clock, store = Clock(monkeypatch), Polled(arrives_at=1)
    interruptible(store).check_in(Ctx())  # type: ignore[arg-type]
    assert (store.polls, clock.sleeps) == (1, [])


def test_an_interruptible_check_in_times_out_at_its_deadline_naming_the_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock, store = Clock(monkeypatch), Polled(arrives_at=None)
    ctx = Ctx()
    with pytest.raises(DistributedError, match=r"after 0.5 s: 1 of 2 ranks arrived; missing: rank 1\.") as caught:
        interruptible(store, timeout_s=0.5).check_in(ctx)  # type: ignore[arg-type]
    assert isinstance(caught.value.__cause__, TimeoutError)
    assert "within 0.5 s" in str(caught.value.__cause__)
    assert clock.sleeps[-1] < 0.1 and round(sum(clock.sleeps), 6) == 0.5  # the last sleep ends at the deadline
    assert clock.now == pytest.approx(1000.5) and [e for e, _ in ctx.emitted] == ["state_timeout"]


def test_an_interruptible_check_in_whose_deadline_passes_just_before_it_sleeps_does_not_sleep_a_negative_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The deadline is checked, then the time left is read again for the sleep: it may have run out."""
    clock, store = Clock(monkeypatch), Polled(arrives_at=None)
    readings = iter([1000.0, 1000.49, 1000.51, 1000.51])  # the deadline, its check, the sleep's, the next check
    monkeypatch.setattr("time.monotonic", lambda: next(readings))
    with pytest.raises(DistributedError, match="after 0.5 s"):
        interruptible(store, timeout_s=0.5).check_in(Ctx())  # type: ignore[arg-type]
    assert clock.sleeps == [0.0]


# -- publishing and reading failures -------------------------------------------------------------------
def test_the_first_published_failure_wins_and_each_rank_keeps_its_own() -> None:
    store = MemoryStore()
    watch = make(store)
    watch.publish(failure(2))
    watch.publish(failure(1))
    assert first(store) == failure(2) and Failure.decode(store.data["failure/1"]) == failure(1)
    assert watch.first_failure() == failure(2)
    other = MemoryStore()
    watch.publish(failure(1), other)
    assert first(other) == failure(1) and first(store) == failure(2)
    assert watch.first_failure(other) == failure(1)


def test_an_unreachable_store_publishes_nothing_and_reads_as_no_news() -> None:
    store = MemoryStore()
    store.set("first", failure(1).encode())
    watch = make(store)
    store.fail_with = CLOSED
    watch.publish(failure(0))
    assert watch.first_failure() is None
    store.fail_with = None
    watch._store_gone = True
    assert watch.first_failure() is None and watch.peer_failure() is None


def test_a_peer_failure_is_anothers_published_or_noticed_failure_never_our_own() -> None:
    store = MemoryStore()
    watch = make(store, rank=1)
    assert watch.peer_failure() is None
    watch._noticed = (failure(1, "lost"), 0.0)
    assert watch.peer_failure() is None
    watch._noticed = (failure(2, "lost"), 0.0)
    assert watch.peer_failure() == failure(2, "lost")
    store.set("first", failure(1).encode())
    assert watch.peer_failure() == failure(2, "lost"), "our own published failure is not a peer's"
    store.set("first", failure(0).encode())
    assert watch.peer_failure() == failure(0)


def test_a_lifecycle_that_fails_twice_publishes_its_first_reason_only() -> None:
    store = MemoryStore()
    watch = make(store, rank=1)
    watch.mark_failed("MODEL_BUILT", "first reason")
    watch.mark_failed("CALLBACKS_BOUND", "second reason")
    assert Failure.decode(store.data["failure/1"]) == Failure(
        rank=1, state="MODEL_BUILT", error="first reason", kind="exception"
    )


# -- a failure inside a watched phase ------------------------------------------------------------------


def test_a_store_that_fails_does_not_keep_a_phase_from_running() -> None:
    store = MemoryStore()
    watch = make(store)
    store.fail_with = CLOSED
    with watch.watching(Emitted(), "build_model", "MODEL_BUILT"):
        ran = True
    assert ran


def test_an_error_while_a_peer_failed_first_makes_this_rank_its_victim() -> None:
    store = MemoryStore()
    store.set("first", failure(0, state="DISTRIBUTED").encode())
    watch, emitted = make(store, rank=2), Emitted()
    with pytest.raises(DistributedError) as caught, watch.watching(emitted, "build_model", "MODEL_BUILT"):
        raise RuntimeError("gloo: connection reset")
    assert str(caught.value) == (
        "rank 0 failed in DISTRIBUTED (boom on 0); rank 2 stopped waiting for it in "
        "MODEL_BUILT. The root cause is on rank 0"
    )
    assert caught.value.field == "startup" and isinstance(caught.value.__cause__, RuntimeError)
    assert emitted == [
        (
            "peer_failed",
            {
                "peer_rank": 0,
                "peer_state": "DISTRIBUTED",
                "error": "boom on 0",
                "peer_kind": "exception",
                "trigger": "build_model",  # what this rank was doing: the audit finds a rank that went on by it
            },
        )
    ]
    assert "failure/2" not in store.data and watch.failed and watch._active is None


@pytest.mark.parametrize("signal", [KeyboardInterrupt(), SystemExit(143)])
def test_a_signal_is_this_ranks_own_failure_even_after_a_peers(signal: BaseException) -> None:
    store = MemoryStore()
    store.set("first", failure(0).encode())
    watch, emitted = make(store, rank=2), Emitted()
    with pytest.raises(type(signal)) as caught, watch.watching(emitted, "build_model", "MODEL_BUILT"):
        raise signal
    assert caught.value is signal and emitted == []
    assert Failure.decode(store.data["failure/2"]).kind == "signal"


def test_an_error_of_its_own_is_published_and_raised_as_it_is() -> None:
    store = MemoryStore()
    watch, emitted = make(store, rank=1), Emitted()
    error = ValueError("bad shape")
    with pytest.raises(ValueError) as caught, watch.watching(emitted, "build_model", "MODEL_BUILT"):
        raise error
    assert caught.value is error and caught.value.__cause__ is None and emitted == []
    assert first(store) == Failure(rank=1, state="MODEL_BUILT", error="ValueError: bad shape", kind="exception")
    assert watch.failed


def test_a_collective_that_times_out_with_no_failure_reported_is_a_state_timeout() -> None:
    store = MemoryStore()
    watch, emitted = make(store, rank=1, timeout_s=12.0), Emitted()
    with pytest.raises(DistributedError) as caught, watch.watching(emitted, "build_model", "MODEL_BUILT"):
        raise TimeoutError("allreduce")
    assert str(caught.value) == (
        "MODEL_BUILT timed out after 12 s on rank 1 (TimeoutError: allreduce); no rank "
        "reported a failure. Raise startup.timeout_s if this state is slow"
    )
    assert caught.value.field == "startup.timeout_s"
    assert emitted == [("state_timeout", {"state": "MODEL_BUILT", "trigger": "build_model", "timeout_s": 12.0})]
    assert first(store) == Failure(rank=1, state="MODEL_BUILT", error="TimeoutError: allreduce", kind="timeout")
    assert store.data["failure/1"] == store.data["first"], "a collective's timeout is not called a rendezvous's"


GLOO = "[third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting {ms}ms for recv operation"
NCCL = "Watchdog caught collective operation timeout: WorkNCCL(OpType=ALLREDUCE, Timeout(ms)={ms}) ran for {ms} ms"


class DistBackendError(RuntimeError):
    """What NCCL's watchdog raises, by torch's module (without importing torch here)."""

    __module__ = "torch.distributed"


@pytest.mark.parametrize(
    ("text", "fired"),
    [(GLOO.format(ms=3000), "3"), (NCCL.format(ms=600000), "600"), (GLOO.format(ms=101001), "101.001")],
)
def test_a_group_timeout_that_is_not_the_startups_is_named_as_the_groups_with_its_fix(text: str, fired: str) -> None:
    store = MemoryStore()
    watch, emitted = make(store, rank=1, timeout_s=100.0), Emitted()
    with pytest.raises(DistributedError) as caught, watch.watching(emitted, "build_model", "MODEL_BUILT"):
        raise DistBackendError(text)
    assert str(caught.value) == (
        f"MODEL_BUILT: a collective timed out after {fired} s on rank 1, its process group's own timeout, not "
        f"startup.timeout_s (100 s) (DistBackendError: {text}); no rank reported a failure. Give the group the "
        "startup's timeout: new_group(timeout=...) where it is made (the startup log's timeouts_read and "
        "group_created records name each group's timeout and creator; lifecycle audit --select LA028)"
    )
    assert caught.value.field == "process_group.timeout"
    assert first(store) == Failure(rank=1, state="MODEL_BUILT", error=f"DistBackendError: {text}", kind="timeout")


@pytest.mark.parametrize("ms", [100000, 101000, 99000, 100999])
def test_a_group_timeout_within_a_percent_of_the_startups_is_the_startups(ms: int) -> None:
    watch = make(MemoryStore(), rank=1, timeout_s=100.0)
    with pytest.raises(DistributedError) as caught, watch.watching(Emitted(), "build_model", "MODEL_BUILT"):
        raise RuntimeError(GLOO.format(ms=ms))
    assert caught.value.field == "startup.timeout_s"
    assert str(caught.value).startswith("MODEL_BUILT timed out after 100 s on rank 1 (RuntimeError: ")


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (
            RuntimeError(
                "[third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
                "20000ms for recv operation to complete"
            ),
            "timeout",
        ),
        (TimeoutError("deadline"), "timeout"),
        (RuntimeError("[c10d] wait timeout after 30000ms"), "timeout"),  # torch's store, by its words
        (DistBackendError("Watchdog caught collective operation timeout"), "timeout"),  # NCCL's, by its module
        (DistBackendError("ProcessGroupNCCL is not available"), "exception"),
        (ValueError("request timeout must be positive"), "exception"),  # a user's words, not a timeout
        (RuntimeError("Connection closed by peer"), "exception"),
        (KeyboardInterrupt(), "signal"),
        (SystemExit(143), "signal"),
    ],
)
def test_a_failure_is_published_as_a_timeout_only_when_torch_timed_out(error: BaseException, kind: str) -> None:
    assert kind_of(error) == kind


def test_a_connection_lost_mid_collective_waits_for_the_verdict_that_names_the_dead_peer() -> None:
    store = MemoryStore()
    watch, emitted, limits = make(store, rank=1), Emitted(), []

    def verdict(limit_s: float) -> Failure:
        limits.append(limit_s)
        return failure(2, "lost")

    watch._await_peer_failure = verdict  # type: ignore[method-assign]
    with pytest.raises(DistributedError, match="rank 2 failed"), watch.watching(emitted, "build_model", "MODEL_BUILT"):
        raise RuntimeError("gloo: Connection closed by peer")
    # the ring publishes the verdict `node_stale_s` after the last beat; two rounds and a few polls to read it
    assert limits == [pytest.approx(watch.node_stale_s + 2 * watch.interval_s + 3 * watch.poll_s)]
    assert [e for e, _ in emitted] == ["peer_failed"]
    with pytest.raises(ValueError), watch.watching(emitted, "build_model", "MODEL_BUILT"):
        raise ValueError("not a lost connection")
    assert len(limits) == 1


class VerdictLater(MemoryStore):
    """Rank 0's verdict lands after this rank has looked for it `after` times."""

    def __init__(self, after: int) -> None:
        super().__init__()
        self.after = after

    def check(self, keys: list[str]) -> bool:
        if keys == ["first"]:
            self.after -= 1
            if self.after == 0:
                self.set("first", failure(0, "lost").encode())
        return super().check(keys)


def test_the_wait_for_a_verdict_ends_with_the_verdict_or_at_its_limit() -> None:
    store = MemoryStore()
    watch = make(store, rank=1)
    assert watch._await_peer_failure(0.25) is None
    store.set("first", failure(0).encode())
    assert watch._await_peer_failure(5.0) == failure(0)
    later = make(VerdictLater(3), rank=1)  # polls every 0.1 s: the verdict comes on the third look
    assert later._await_peer_failure(5.0) == failure(0, "lost")


WATCH_LEFT_RUNNING = """
import sys
import time
from lifecycle.rankwatch import RankWatch, WatchSettings

class Store:
    def add(self, key, amount): return 1
    def set(self, key, value): pass
    def check(self, keys): return False
    def multi_get(self, keys): return [b"1" for _ in keys]

watch = RankWatch(Store(), rank=1, world_size=2, settings=WatchSettings(timeout_s=600.0, poll_s=0.05))
watch.start()
print("started", flush=True)
"""


def test_a_watcher_left_running_never_keeps_the_process_alive() -> None:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", WATCH_LEFT_RUNNING], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0 and done.stdout == "started\n"


# -- the watcher: the store's host ---------------------------------------------------------------------
def test_a_closed_store_connection_names_its_host_after_lost_s_other_errors_after_stale_s() -> None:
    watch = make(rank=1)  # lost_s 1 s, stale_s 6 s
    watch._store_lost(CLOSED, 0.9, 50.0)
    assert not watch._store_gone
    watch._store_lost(RuntimeError("Socket Timeout"), 5.9, 50.0)
    assert not watch._store_gone
    watch._store_lost(CLOSED, 1.0, 50.0)
    assert watch._store_gone and watch._noticed is not None
    error = f"the rendezvous store it hosts stopped answering for 1 s ({CLOSED})"
    assert watch._noticed == (Failure(rank=0, state="unknown", kind="lost", error=error), 50.0)
    slow = make(rank=1)
    slow._store_lost(RuntimeError("Socket Timeout"), 6.0, 50.0)
    assert slow._store_gone and slow._noticed is not None and slow._noticed[0].rank == 0


@pytest.mark.parametrize("host", [None, 1])
def test_no_rank_is_blamed_for_an_agents_store_or_for_our_own(host: int | None) -> None:
    watch = make(rank=1, host=host)
    watch._store_lost(CLOSED, 5.0, 50.0)
    assert watch._store_gone and watch._noticed is None


def test_a_failure_noticed_before_the_store_went_is_kept() -> None:
    watch = make(rank=1, host=2)
    watch._noticed = (failure(0), 1.0)
    watch._store_lost(CLOSED, 5.0, 50.0)
    assert watch._noticed == (failure(0), 1.0)


# -- the watcher: ending a blocked main thread ---------------------------------------------------------
def active(emitted: Emitted, started: float, *, deadline: bool = True) -> ActiveWork:
    return ActiveWork(emitted, "build_model", "MODEL_BUILT", started, deadline)


@pytest.mark.parametrize(("kind", "grace"), [("exception", 3.0), ("timeout", 3.0)])
def test_a_blocked_victim_is_ended_its_grace_after_the_failure_was_noticed(kind: str, grace: float) -> None:
    exits: list[int] = []
    watch, emitted = make(rank=1, exits=exits), Emitted()
    watch._noticed = (failure(2, kind), 100.0)
    watch._escalate(active(emitted, 90.0), 100.0 + grace - 0.01)
    assert exits == [] and emitted == []
    watch._escalate(active(emitted, 90.0), 100.0 + grace)
    assert exits == [EXIT_CODE] and watch._stop.is_set()
    fields = {
        "peer_rank": 2,
        "peer_state": "DISTRIBUTED",
        "error": "boom on 2",
        "peer_kind": kind,
        "trigger": "build_model",
    }
    assert emitted == [("peer_failed", fields)]


def test_a_lost_peer_is_named_in_the_log_one_poll_after_it_is_noticed_and_the_victim_ended_a_second_later() -> None:
    """No record of a lost rank's own will come: the victim names it at the watcher's next poll (a
    follower of the logs need not wait for the grace), and still leaves the collective a second to raise
    by itself. The poll first lets a signal that came with it reach the signal watch (the next test)."""
    exits: list[int] = []
    watch, emitted = make(rank=1, exits=exits), Emitted()
    watch._noticed = (failure(2, "lost"), 100.0)
    watch._escalate(active(emitted, 90.0), 100.0)
    assert exits == [] and emitted == [], "not in the tick that noticed it"
    watch._escalate(active(emitted, 90.0), 100.0 + watch.poll_s)
    fields = {
        "peer_rank": 2,
        "peer_state": "DISTRIBUTED",
        "error": "boom on 2",
        "peer_kind": "lost",
        "trigger": "build_model",
    }
    assert exits == [] and emitted == [("peer_failed", fields)]
    watch._escalate(active(emitted, 90.0), 100.99)
    assert exits == [] and len(emitted) == 1
    watch._escalate(active(emitted, 90.0), 101.0)
    assert exits == [EXIT_CODE] and watch._stop.is_set() and emitted == [("peer_failed", fields)], "named once"


def test_a_lost_peer_noticed_as_a_stopped_rank_continues_is_not_named_when_its_signal_reaches_the_watch_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rank stopped (SIGSTOP) with a SIGINT on its way finds its peer gone when it continues: the signal
    watch marks the signal within the poll, and the signal, not the peer, ends this rank."""
    from lifecycle.runtime import signals

    exits: list[int] = []
    watch, emitted = make(rank=1, exits=exits), Emitted()
    watch._noticed = (failure(2, "lost"), 100.0)
    watch._escalate(active(emitted, 90.0), 100.0)  # the tick that noticed it, as the process continued
    monkeypatch.setattr(signals, "pending_signal", lambda: 2)  # the signal watch marks the SIGINT
    watch._escalate(active(emitted, 90.0), 100.0 + watch.poll_s)
    assert emitted == [] and exits == []


def test_a_lost_peer_named_by_the_watcher_is_not_named_again_when_the_collective_raises() -> None:
    store = MemoryStore()
    lost = failure(2, "lost")
    store.set("first", lost.encode())
    watch, emitted = make(store, rank=1), Emitted()
    watch._noticed = (lost, 100.0)
    with pytest.raises(DistributedError), watch.watching(emitted, "build_model", "MODEL_BUILT"):
        watch._escalate(watch._active, 100.0 + watch.poll_s)  # type: ignore[arg-type]  # set by `watching`
        assert len(emitted) == 1, "the watcher named it"
        raise RuntimeError("Connection closed by peer")
    assert [(e, f["peer_rank"], f["peer_kind"]) for e, f in emitted] == [("peer_failed", 2, "lost")]


def test_a_lost_peer_is_not_named_by_a_rank_that_got_a_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    from lifecycle.runtime import signals

    exits: list[int] = []
    watch, emitted = make(rank=1, exits=exits), Emitted()
    watch._noticed = (failure(2, "lost"), 100.0)
    monkeypatch.setattr(signals, "pending_signal", lambda: 15)
    watch._escalate(active(emitted, 90.0), 105.0)
    assert exits == [] and emitted == [], "the signal watch logs startup_aborted and ends it"


def test_a_short_grace_is_not_made_longer_for_a_lost_peer() -> None:
    exits: list[int] = []
    watch = RankWatch(
        MemoryStore(),
        rank=1,
        world_size=2,
        settings=WatchSettings(timeout_s=60.0, grace_s=0.5),
        exit_process=exits.append,
    )
    watch._noticed = (failure(2, "lost"), 100.0)
    watch._escalate(active(Emitted(), 0.0), 100.5)
    assert exits == [EXIT_CODE]


def test_the_grace_counts_from_when_the_phase_started_if_the_failure_was_noticed_before() -> None:
    exits: list[int] = []
    watch = make(rank=1, exits=exits)
    watch._noticed = (failure(2), 100.0)
    watch._escalate(active(Emitted(), 200.0), 202.9)
    assert exits == []
    watch._escalate(active(Emitted(), 200.0), 203.0)
    assert exits == [EXIT_CODE]


def test_a_phase_past_its_deadline_and_grace_is_a_state_timeout_and_ends_the_process() -> None:
    store, exits = MemoryStore(), []
    watch, emitted = make(store, rank=1, timeout_s=20.0, exits=exits), Emitted()
    watch._escalate(active(emitted, 100.0), 122.99)
    assert exits == [] and emitted == []
    watch._escalate(active(emitted, 100.0, deadline=False), 10_000.0)
    assert exits == [] and emitted == [], "a training step relies on its collectives' own timeout"
    watch._escalate(active(emitted, 100.0), 123.0)
    assert exits == [EXIT_CODE] and watch._stop.is_set()
    assert emitted == [("state_timeout", {"state": "MODEL_BUILT", "trigger": "build_model", "timeout_s": 20.0})]
    assert first(store) == Failure(
        rank=1, state="MODEL_BUILT", error="MODEL_BUILT still running after 20 s", kind="timeout"
    )


# -- the module's entry points -------------------------------------------------------------------------
def test_without_a_watch_the_entry_points_do_nothing() -> None:
    ctx = Ctx(None)
    with watched(ctx, "MODEL_BUILT"), watched_step(ctx.runtime.rank_watch, ctx.emit, 3):  # type: ignore[arg-type]
        assert not ctx.emitted
    mark_failed(None, "MODEL_BUILT", "x")


def test_the_entry_points_reach_the_jobs_watch() -> None:
    store = MemoryStore()
    watch = make(store, rank=1)
    ctx = Ctx(watch)
    with watched(ctx, "MODEL_BUILT"):  # type: ignore[arg-type]
        assert watch._active is not None and (watch._active.trigger, watch._active.deadline) == (
            "init_distributed",
            True,
        )
    with watched_step(ctx.runtime.rank_watch, ctx.emit, 7):
        assert watch._active is not None
        assert (watch._active.trigger, watch._active.state, watch._active.deadline) == (
            "step 7",
            "CALLBACKS_BOUND",
            False,
        )
    mark_failed(ctx.runtime.rank_watch, "CALLBACKS_BOUND", "user loop")
    assert watch.failed and first(store) == Failure(
        rank=1, state="CALLBACKS_BOUND", error="user loop", kind="exception"
    )
    store.fail_with = CLOSED
    mark_failed(ctx.runtime.rank_watch, "CALLBACKS_BOUND", "again")  # never raises


def test_a_watch_without_check_in_learns_a_peers_failure_from_the_store_and_ends_its_blocked_phase() -> None:
    store, exits, emitted = MemoryStore(), [], Emitted()
    watch = make(store, rank=0, exits=exits)  # no register/join: the store's `first` only, no ring
    store.data["first"] = failure(2, state="MODEL_BUILT").encode()
    with watch.watching(emitted, "step 4", "CALLBACKS_BOUND", deadline=False):
        started = time.monotonic()
        watch.tick(started)
        watch.tick(started + watch.grace_s + 0.5)
    assert exits == [EXIT_CODE] and [(e, f["peer_rank"]) for e, f in emitted] == [("peer_failed", 2)]
