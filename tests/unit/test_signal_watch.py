"""A SIGTERM/SIGINT whose handler the main thread cannot run (it sits in native code: a gloo collective,
a store wait) is still noticed: the signal watch reports it after its grace, the rank watch leaves that
process to it instead of logging `peer_failed`, and the engine logs `startup_aborted` and exits 128 + N.
Real signals, real processes; no torch."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from lifecycle.rankwatch import EXIT_CODE, Failure, RankWatch, WatchSettings
from lifecycle.runtime.signals import SignalWatch, pending_signal
from tests.unit.test_rank_watch_verdicts import Emitted, MemoryStore

ROOT = Path(__file__).resolve().parents[2]


def _until(what: Any, limit_s: float = 10.0) -> None:
    deadline = time.monotonic() + limit_s
    while not what() and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.fixture
def sigterm_handler() -> Iterator[list[int]]:
    """A SIGTERM handler that records the signal, and does not tell any watch it took it."""
    got: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: got.append(signum))
    yield got
    signal.signal(signal.SIGTERM, previous)


def test_a_watch_left_armed_whose_handler_was_replaced_does_not_claim_the_signal(sigterm_handler: list[int]) -> None:
    """A lifecycle never shut down leaves its watch armed; the handler now installed (a later
    lifecycle's, the user's) took the signal, so the old watch must not end the process for it."""
    blocked: list[tuple[int, float]] = []
    mine = lambda signum, frame: None  # noqa: E731 - the old owner's handler, no longer installed
    watch = SignalWatch(
        [signal.SIGTERM],
        lambda s, w: blocked.append((s, w)),
        grace_s=0.3,
        owns=lambda signum: signal.getsignal(signum) is mine,
    )
    watch.arm()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        _until(lambda: bool(sigterm_handler), 2.0)
        time.sleep(1.0)
    finally:
        watch.disarm()
    assert blocked == [] and sigterm_handler == [signal.SIGTERM]


def test_a_signal_no_handler_took_is_pending_then_reported_once_after_the_grace(sigterm_handler: list[int]) -> None:
    blocked: list[tuple[int, float]] = []
    watches = lambda: [t.name for t in threading.enumerate()].count("lifecycle-signal-watch")  # noqa: E731
    before = watches()  # an earlier test's lifecycle, never shut down, may still hold one
    watch = SignalWatch([signal.SIGTERM, signal.SIGINT], lambda s, w: blocked.append((s, w)), grace_s=0.3)
    watch.arm()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        _until(lambda: pending_signal() is not None, 2.0)
        assert pending_signal() == signal.SIGTERM and blocked == []
        _until(lambda: bool(blocked))
        time.sleep(0.3)
    finally:
        watch.disarm()
    assert [s for s, _ in blocked] == [signal.SIGTERM] and blocked[0][1] >= 0.3
    assert pending_signal() is None and sigterm_handler == [signal.SIGTERM]
    assert watches() == before, "disarmed: its thread is gone"


def test_a_signal_the_handler_took_is_its_own(sigterm_handler: list[int]) -> None:
    blocked: list[tuple[int, float]] = []
    watch = SignalWatch([signal.SIGTERM], lambda s, w: blocked.append((s, w)), grace_s=0.2)
    signal.signal(signal.SIGTERM, lambda signum, _frame: (watch.taken(), sigterm_handler.append(signum)))
    watch.arm()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        _until(lambda: bool(sigterm_handler))
        time.sleep(0.6)
        assert pending_signal() is None
    finally:
        watch.disarm()
    assert blocked == [] and sigterm_handler == [signal.SIGTERM]


def test_disarm_gives_the_wakeup_fd_back_and_it_got_every_signal_meanwhile(sigterm_handler: list[int]) -> None:
    read, write = os.pipe()
    os.set_blocking(write, False)
    before = signal.set_wakeup_fd(write)
    watch = SignalWatch([signal.SIGTERM], lambda s, w: None, grace_s=0.1)
    try:
        watch.arm()
        os.kill(os.getpid(), signal.SIGTERM)
        _until(lambda: bool(sigterm_handler))
        watch.disarm()
        assert signal.set_wakeup_fd(before) == write
        assert os.read(read, 16) == bytes([signal.SIGTERM])  # forwarded: asyncio's loop would see it
    finally:
        os.close(read)
        os.close(write)


def test_a_rank_blocked_with_a_signal_is_left_to_the_signal_watch_not_ended_as_a_peers_victim(
    sigterm_handler: list[int],
) -> None:
    store, exits, emitted = MemoryStore(), [], Emitted()
    store.set("first", Failure(rank=0, state="DISTRIBUTED", error="StartupAborted: ...", kind="signal").encode())
    watch = RankWatch(
        store,
        rank=1,
        world_size=2,
        settings=WatchSettings(timeout_s=600.0, poll_s=0.05, grace_s=0.2),
        exit_process=exits.append,
    )
    signals = SignalWatch([signal.SIGTERM], lambda s, w: None, grace_s=60.0)
    signals.arm()
    watch.start()
    try:
        with watch.watching(emitted, "init_distributed", "DISTRIBUTED"):
            os.kill(os.getpid(), signal.SIGTERM)
            _until(lambda: pending_signal() is not None, 2.0)
            time.sleep(1.0)  # 5 times the grace after the peer's failure
            assert exits == [] and emitted == [], "the signal, not the peer, stopped this rank"
            signals.disarm()  # without a pending signal, the peer's failure ends it as before
            _until(lambda: bool(exits))
    finally:
        signals.disarm()
        watch.stop()
    assert exits == [EXIT_CODE] and [e for e, _ in emitted] == ["peer_failed"]


BLOCKED_CHILD = textwrap.dedent("""
    import ctypes, signal, sys
    from lifecycle import InProcessPhases, Lifecycle, RunConfig
    from states import State

    class BlockedInNativeCode(InProcessPhases):
        def _maybe_fail(self, name):
            super()._maybe_fail(name)
            if name == "init_distributed":
                # As a gloo call whose peer never answers, the main thread stays in native code: it says
                # BLOCKED from in there. (SIGTERM masked here, the kernel runs the C-level handler on another
                # thread; in gloo it interrupts a system call that is retried.)
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
                ctypes.CDLL(None).system(b"echo BLOCKED; exec sleep 60")

    Lifecycle(RunConfig(), None, sys.argv[1], phases=BlockedInNativeCode()).advance_to(State.CALLBACKS_BOUND)
""")


def _blocked_child_sigtermed(
    tmp_path: Path,
    *,
    started_blocked: bool,
) -> tuple[subprocess.Popen[str], float | None, str]:
    """The child blocked in native code, sent SIGTERM: (child, seconds to its exit or None, stderr).
    `started_blocked`: its parent handed it SIGTERM and SIGINT blocked (the mask survives exec)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    both = {signal.SIGTERM, signal.SIGINT}
    blocks = (lambda: signal.pthread_sigmask(signal.SIG_BLOCK, both)) if started_blocked else None
    child = subprocess.Popen(
        [sys.executable, "-c", BLOCKED_CHILD, str(tmp_path)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=blocks,
    )
    assert child.stdout is not None
    took = None
    try:
        assert child.stdout.readline().strip() == "BLOCKED"
        sent = time.monotonic()
        child.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=30)
            took = time.monotonic() - sent
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)  # the `sleep` it ran (it holds the pipes), or all of it
        _out, err = child.communicate()
    return child, took, err


@pytest.mark.parametrize("started_blocked", [False, True], ids=["mask-empty", "mask-inherited-blocked"])
def test_a_sigterm_to_a_blocked_main_thread_logs_startup_aborted_and_exits_143_after_the_grace(
    tmp_path: Path,
    started_blocked: bool,
) -> None:
    """Also when the process was started with SIGTERM blocked on every thread (a parent that left it
    blocked): the signal watch's thread takes it. (pytest's own main thread must not keep such a
    mask: every later child would inherit it, deaf to SIGTERM; tests/conftest.py fails a test that
    leaves it.)"""
    from lifecycle.runtime.signals import GRACE_S

    child, took, err = _blocked_child_sigtermed(tmp_path, started_blocked=started_blocked)
    assert took is not None, f"the child did not end within 30 s of SIGTERM: {err[-2000:]}"
    assert child.returncode == 128 + signal.SIGTERM, err
    assert GRACE_S <= took < GRACE_S + 10, took
    records = [orjson.loads(line) for line in (tmp_path / "rank-00000.jsonl").read_bytes().splitlines()]
    last = records[-1]
    assert (last["event"], last["signal"], last["state"], last["trigger"]) == (
        "startup_aborted",
        "SIGTERM",
        "SERVICES_READY",
        "init_distributed",
    )
    assert last["blocked_s"] >= GRACE_S
    assert err.strip().splitlines()[-1] == (
        "lifecycle: rank 0: startup aborted by SIGTERM in state SERVICES_READY during init_distributed(); its main "
        f"thread was blocked in native code for {last['blocked_s']:.0f} s, so the process ends without the releases "
        "(exit 143)."
    )


def test_a_signal_the_kernel_gave_another_thread_reaches_a_sleeping_main_thread_within_the_grace() -> None:
    """The kernel may hand a process's SIGTERM to any thread that does not block it; Python runs the
    handler on the main thread only when that thread next runs bytecode. A main thread in `time.sleep`
    is not blocked: the watch sends the signal on to it, and its handler runs long before the sleep's
    end and before the grace; nothing is reported blocked."""
    blocked: list[tuple[int, float]] = []
    took: list[float] = []
    watch = SignalWatch(
        [signal.SIGTERM],
        lambda s, w: blocked.append((s, w)),
        grace_s=1.0,
        owns=lambda signum: signal.getsignal(signum) is handler,
    )

    def handler(_signum: int, _frame: object) -> None:
        watch.taken()
        took.append(time.monotonic())

    previous = signal.signal(signal.SIGTERM, handler)
    other = threading.Thread(target=time.sleep, args=(3.0,), daemon=True)
    other.start()
    watch.arm()
    try:
        start = time.monotonic()
        assert other.ident is not None
        signal.pthread_kill(other.ident, signal.SIGTERM)  # the C-level handler runs on that thread
        time.sleep(2.0)  # its handler runs inside the sleep only for a signal sent to this thread
        time.sleep(0.2)  # the watch's grace would have passed by now
    finally:
        watch.disarm()
        signal.signal(signal.SIGTERM, previous)
    assert len(took) == 1 and blocked == [], (took, blocked)
    assert took[0] - start < 1.0, took[0] - start
