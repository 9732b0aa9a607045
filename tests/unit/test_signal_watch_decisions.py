"""The signal watch's decisions, one by one: when the grace has passed (on the clock AND on
the watch's own polls), which wakeup fd gets the bytes forwarded, what a forked child keeps, what arm
and disarm leave behind. Real signals to this process, real pipes, threads, a fork and a
subinterpreter; the only stand-in is the clock, passed to the watch, to stall or jump it at will."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lifecycle.runtime.signals import GRACE_S, POLL_S, SignalWatch, pending_signal

ROOT = Path(__file__).resolve().parents[2]
TERM, INT, USR1 = int(signal.SIGTERM), int(signal.SIGINT), int(signal.SIGUSR1)


def _until(what: Any, limit_s: float = 10.0) -> bool:
    deadline = time.monotonic() + limit_s
    while not what() and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(what())


class Clock:
    """A clock the test sets; it counts its reads (the watch reads it once on receipt, once a poll)."""

    def __init__(self, *values: float) -> None:
        self.values = list(values)  # read in turn; the last one stays
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.values.pop(0) if len(self.values) > 1 else self.values[0]

    def set(self, value: float) -> None:
        self.values = [value]


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[int, float]] = []
        self.called = threading.Event()

    def __call__(self, signum: int, waited_s: float) -> None:
        self.calls.append((signum, waited_s))
        self.called.set()


@pytest.fixture
def handlers() -> Iterator[list[int]]:
    """Handlers for SIGTERM, SIGINT and SIGUSR1 that record the signal and tell no watch they took it."""
    got: list[int] = []
    previous = {s: signal.signal(s, lambda signum, _frame: got.append(signum)) for s in (TERM, INT, USR1)}
    yield got
    for s, handler in previous.items():
        signal.signal(s, handler)


@pytest.fixture
def wakeup() -> Iterator[tuple[int, int]]:
    """A pipe (read, write) whose write end is the wakeup fd set before any watch (asyncio's)."""
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    before = signal.set_wakeup_fd(write)
    yield read, write
    signal.set_wakeup_fd(before)
    os.close(read)
    os.close(write)


@contextlib.contextmanager
def _pipe_on(fd: int) -> Iterator[int]:
    """fd (0, 1) is, meanwhile, the non-blocking write end of a pipe; yields its read end."""
    saved = os.dup(fd)
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    os.dup2(write, fd)
    os.close(write)
    try:
        yield read
    finally:
        os.dup2(saved, fd)
        os.close(saved)
        os.close(read)


def _drain(read: int) -> bytes:
    with contextlib.suppress(BlockingIOError):
        return os.read(read, 1 << 16)
    return b""


def _gather(read: int, got: bytearray) -> bytes:
    got += _drain(read)
    return bytes(got)


def test_the_documented_grace_is_the_code_s() -> None:
    found = re.search(r"\*\*([\d.]+) s\*\* later \(`GRACE_S`\)", (ROOT / "docs/failures.md").read_text())
    assert found is not None
    assert float(found[1]) == GRACE_S == SignalWatch([TERM], Recorder()).grace_s


def test_the_grace_and_the_owner_are_keyword_only() -> None:
    assert SignalWatch(signals=[TERM], on_blocked=Recorder(), grace_s=1.0).grace_s == 1.0
    with pytest.raises(TypeError):
        SignalWatch([TERM], Recorder(), 1.0)  # type: ignore[call-arg]


def test_a_process_stalled_past_the_grace_still_gets_the_grace_in_polls(handlers: list[int]) -> None:
    """The clock jumped past the grace right after the signal came (the whole process stalled): the
    main thread had no chance to run either, so the watch still polls grace_s / POLL_S times."""
    blocked, clock = Recorder(), Clock(500.0, 1500.0)
    watch = SignalWatch([TERM], blocked, grace_s=0.2, clock=clock)
    watch.arm()
    try:
        os.kill(os.getpid(), TERM)
        assert blocked.called.wait(10.0)
    finally:
        watch.disarm()
    assert blocked.calls == [(TERM, 1000.0)]
    assert clock.reads == 1 + round(0.2 / POLL_S) + 1, "the receipt, then one read a poll, the last one reports"


def test_a_clock_that_has_not_reached_the_grace_holds_the_report_whatever_the_polls(handlers: list[int]) -> None:
    blocked, clock = Recorder(), Clock(0.0)
    watch = SignalWatch([TERM], blocked, grace_s=0.25, clock=clock)
    watch.arm()
    try:
        os.kill(os.getpid(), TERM)
        assert _until(lambda: clock.reads >= 15), "three times the polls the grace needs"
        assert blocked.calls == [] and pending_signal() == TERM
        clock.set(0.25)  # the grace, exactly
        assert blocked.called.wait(10.0)
    finally:
        watch.disarm()
    assert blocked.calls == [(TERM, 0.25)]


def test_after_the_report_the_signal_is_no_longer_pending(handlers: list[int]) -> None:
    blocked = Recorder()
    watch = SignalWatch([TERM, INT], blocked, grace_s=0.1)
    watch.arm()
    try:
        os.kill(os.getpid(), TERM)
        assert blocked.called.wait(10.0)
        assert watch.pending() is None and pending_signal() is None, "reported: the watch is done with it"
    finally:
        watch.disarm()
    assert [s for s, _ in blocked.calls] == [TERM] and 0.1 <= blocked.calls[0][1] < 30


def test_a_signal_taken_after_it_was_seen_is_never_reported(handlers: list[int]) -> None:
    """The main thread came back from native code within the grace and ran the handler."""
    blocked, clock = Recorder(), Clock(0.0)
    watch = SignalWatch([TERM], blocked, grace_s=0.1, clock=clock)
    watch.arm()
    try:
        os.kill(os.getpid(), TERM)
        assert _until(lambda: watch.pending() == TERM)
        watch.taken()
        clock.set(100.0)
        assert not blocked.called.wait(0.5)
        assert pending_signal() is None
    finally:
        watch.disarm()


def test_disarm_ends_the_watch_keeps_the_first_signal_and_it_arms_again(handlers: list[int]) -> None:
    """A signal pending at disarm is never reported; a later one (SIGINT, queued behind it) does not
    replace it; the reader is gone; arm starts over."""
    blocked, clock = Recorder(), Clock(0.0)
    watch = SignalWatch([TERM, INT], blocked, grace_s=0.1, clock=clock)
    watch.arm()
    thread = watch._thread
    assert thread is not None
    try:
        os.kill(os.getpid(), TERM)
        assert _until(lambda: watch.pending() == TERM)
        os.kill(os.getpid(), INT)
        os.kill(os.getpid(), USR1)
    finally:
        watch.disarm()
    assert not watch.armed and watch._thread is None
    clock.set(100.0)
    assert not blocked.called.wait(0.3), "disarmed: never reported"
    thread.join(10.0)
    assert watch.pending() == TERM, "the first signal counts"
    watch.arm()
    try:
        assert watch.armed and watch.pending() is None
        os.kill(os.getpid(), INT)
        assert _until(lambda: pending_signal() == INT)
    finally:
        watch.disarm()


def test_disarm_waits_about_a_second_for_a_reader_still_in_on_blocked(handlers: list[int]) -> None:
    release, entered = threading.Event(), threading.Event()

    def on_blocked(signum: int, waited_s: float) -> None:
        entered.set()
        release.wait(30)

    watch = SignalWatch([TERM], on_blocked, grace_s=0.05)
    watch.arm()
    thread = watch._thread
    assert thread is not None
    try:
        os.kill(os.getpid(), TERM)
        assert entered.wait(10.0)
        started = time.monotonic()
        watch.disarm()
        took = time.monotonic() - started
    finally:
        release.set()
        watch.disarm()
    thread.join(10.0)
    assert 0.9 <= took < 1.9, took


def test_arming_twice_is_arming_once(wakeup: tuple[int, int]) -> None:
    watch = SignalWatch([TERM], Recorder())
    watch.arm()
    watch.arm()
    watch.disarm()
    assert signal.set_wakeup_fd(wakeup[1]) == wakeup[1], "the wakeup fd is back"
    assert pending_signal() is None


def test_arm_off_the_main_thread_or_interpreter_does_nothing(wakeup: tuple[int, int]) -> None:
    watch = SignalWatch([TERM], Recorder())
    arming = threading.Thread(target=watch.arm)
    arming.start()
    arming.join()
    assert not watch.armed and signal.set_wakeup_fd(wakeup[1]) == wakeup[1]
    try:
        import _xxsubinterpreters as interpreters  # type: ignore[import-not-found]
    except ImportError:  # Python 3.13 renamed it
        pytest.skip("no _xxsubinterpreters")
    code = textwrap.dedent(f"""
        import importlib.util
        spec = importlib.util.spec_from_file_location("signals", {str(ROOT / "lifecycle/runtime/signals.py")!r})
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        watch = module.SignalWatch([{TERM}], lambda s, w: None)
        watch.arm()  # set_wakeup_fd refuses a subinterpreter: no watch, no error
        assert not watch.armed
    """)
    interpreter = interpreters.create()
    try:
        interpreters.run_string(interpreter, code)
    finally:
        interpreters.destroy(interpreter)


def test_the_reader_never_holds_the_interpreter_at_exit() -> None:
    """A watch left armed (its lifecycle never shut down) must not keep the process from ending."""
    code = textwrap.dedent(f"""
        import importlib.util
        spec = importlib.util.spec_from_file_location("signals", {str(ROOT / "lifecycle/runtime/signals.py")!r})
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.SignalWatch([{TERM}], lambda s, w: None).arm()
    """)
    done = subprocess.run([sys.executable, "-c", code], timeout=20, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_nested_watches_the_inner_one_takes_the_signal_and_never_feeds_the_outer(
    handlers: list[int], wakeup: tuple[int, int]
) -> None:
    outer, inner = SignalWatch([TERM], Recorder(), grace_s=60), SignalWatch([TERM], Recorder(), grace_s=60)
    with _pipe_on(0) as stdin, _pipe_on(1) as stdout:
        outer.arm()
        inner.arm()
        try:
            os.kill(os.getpid(), TERM)
            assert _until(lambda: inner.pending() == TERM)
            assert pending_signal() == TERM
            assert not _until(lambda: outer.pending() is not None, 0.3)
        finally:
            inner.disarm()
            outer.disarm()
        assert _drain(stdin) == b"" and _drain(stdout) == b"", "forwarded to no other fd"
    assert _drain(wakeup[0]) == bytes([TERM]), "the fd set before both watches (asyncio's) got it"


def test_a_wakeup_fd_set_between_two_watches_gets_every_byte(handlers: list[int]) -> None:
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    got = bytearray()
    outer, inner = SignalWatch([TERM], Recorder(), grace_s=60), SignalWatch([TERM], Recorder(), grace_s=60)
    outer.arm()
    try:
        replaced = signal.set_wakeup_fd(write)  # asyncio, started after the outer watch armed
        inner.arm()
        try:
            os.kill(os.getpid(), TERM)
            assert _until(lambda: inner.pending() == TERM)
            assert _until(lambda: _gather(read, got) == bytes([TERM]))
        finally:
            inner.disarm()
        signal.set_wakeup_fd(replaced)
    finally:
        outer.disarm()
        os.close(read)
        os.close(write)


@pytest.mark.parametrize("fd", [0, 1], ids=["fd0", "fd1"])
def test_a_previous_wakeup_fd_numbered_0_or_1_still_gets_every_byte(handlers: list[int], fd: int) -> None:
    """A daemon with its stdin/stdout closed gets its wakeup pipe there."""
    with _pipe_on(fd) as read:
        before = signal.set_wakeup_fd(fd)
        watch = SignalWatch([TERM], Recorder(), grace_s=60)
        watch.arm()
        try:
            os.kill(os.getpid(), TERM)
            assert _until(lambda: watch.pending() == TERM)
            got = _drain(read)
        finally:
            watch.disarm()
            signal.set_wakeup_fd(before)
    assert got == bytes([TERM])


def test_a_flood_of_signals_while_the_reader_waits_writes_nothing_to_stderr(
    handlers: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader does not read while it waits for the main thread: the pipe fills, the C-level
    handler's writes fail, and they must fail quietly (no 'Exception ignored' per signal)."""
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    watch = SignalWatch([TERM], Recorder(), grace_s=0.1, clock=Clock(0.0))
    watch.arm()
    try:
        os.kill(os.getpid(), TERM)
        assert _until(lambda: watch.pending() == TERM)
        for _ in range(70_000):  # more bytes than a pipe holds
            os.kill(os.getpid(), USR1)
    finally:
        watch.disarm()
    assert unraisable == []


def test_a_forked_child_forgets_every_watch_and_gets_the_first_wakeup_fd_back(
    wakeup: tuple[int, int],
) -> None:
    outer, inner = SignalWatch([TERM], Recorder(), grace_s=60), SignalWatch([TERM], Recorder(), grace_s=60)
    read, write = os.pipe()
    outer.arm()
    inner.arm()
    try:
        pid = os.fork()
        if pid == 0:  # the child: report, and leave at once
            try:
                report = (outer.armed, inner.armed, signal.set_wakeup_fd(-1) == wakeup[1])
                os.write(write, repr(report).encode())
            finally:
                os._exit(0)
        os.close(write)
        got = os.read(read, 200)
        os.waitpid(pid, 0)
    finally:
        os.close(read)
        inner.disarm()
        outer.disarm()
    assert got == repr((False, False, True)).encode(), got
    assert signal.set_wakeup_fd(wakeup[1]) == wakeup[1], "the parent's watches untouched until disarmed"


def test_a_signal_another_handler_took_is_not_pending_and_never_reported(handlers: list[int]) -> None:
    """The old watch (its lifecycle left mid-startup) gets the byte; a later lifecycle's handler took
    the signal (`took`): the old watch stops waiting, nothing is pending, nothing is reported."""
    from lifecycle.runtime.signals import took

    blocked = Recorder()
    watch = SignalWatch([TERM], blocked, grace_s=0.5)
    signal.signal(TERM, lambda signum, _frame: (handlers.append(signum), took(signum)))
    watch.arm()
    try:
        os.kill(os.getpid(), TERM)
        assert _until(lambda: bool(handlers))
        assert not blocked.called.wait(1.5)  # three graces: the reader has long read the byte
        assert watch.pending() is None, "taken elsewhere: not pending"
    finally:
        watch.disarm()
    assert blocked.calls == []


def test_when_the_fd_comes_back_to_an_outer_watch_only_signals_taken_after_that_count(handlers: list[int]) -> None:
    """A signal the inner watch's handler took (`took`) before the inner one disarmed must not make the
    outer watch, once the fd is its again, call a later signal that nobody takes 'taken'."""
    outer_blocked, inner_blocked = Recorder(), Recorder()
    outer = SignalWatch([TERM], outer_blocked, grace_s=0.3)
    inner = SignalWatch([TERM], inner_blocked, grace_s=60)
    outer.arm()
    try:
        _taken_inside_then_by_nobody(handlers, inner, outer_blocked)
    finally:
        inner.disarm()
        outer.disarm()
    assert [s for s, _ in outer_blocked.calls] == [TERM] and inner_blocked.calls == []


def _taken_inside_then_by_nobody(handlers: list[int], inner: SignalWatch, outer_blocked: Recorder) -> None:
    """`inner` armed over the outer watch; its handler takes a SIGTERM (`took`); `inner` disarms; a
    second SIGTERM that nobody takes is reported by the outer watch, whose fd it is again."""
    from lifecycle.runtime.signals import took

    inner.arm()
    signal.signal(TERM, lambda signum, _frame: (handlers.append(signum), inner.taken(), took(signum)))
    os.kill(os.getpid(), TERM)
    assert _until(lambda: bool(handlers))
    inner.disarm()
    signal.signal(TERM, lambda signum, _frame: handlers.append(signum))  # records, takes nothing
    os.kill(os.getpid(), TERM)
    assert outer_blocked.called.wait(10), "the outer watch reports the signal nobody took"


# -- a wakeup fd left set to a closed fd -------------------------------------------------------------


def _wakeup_fd() -> int:
    current = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(current)
    return current


def test_watches_disarmed_in_the_order_they_armed_give_back_the_fd_set_before_both(handlers: list[int]) -> None:
    """Two lifecycles shut down in the order they started: the first watch's disarm leaves the fd
    with the second, which then gives back the one set before both, not the first's closed pipe
    (a closed fd left set loses every signal; a pipe reusing its number would feed itself)."""
    before = signal.set_wakeup_fd(-1)
    first, second = SignalWatch([TERM], Recorder()), SignalWatch([TERM], Recorder())
    try:
        first.arm()
        second.arm()
        first.disarm()
        second.disarm()
        assert _wakeup_fd() == -1, "the fd set before both is back"
    finally:
        first.disarm()
        second.disarm()
        signal.set_wakeup_fd(before)


def test_a_closed_wakeup_fd_whose_number_a_watch_reuses_is_neither_forwarded_to_nor_given_back(
    handlers: list[int],
) -> None:
    """A wakeup fd its owner closed without resetting (here: the order above, before the fix) whose
    number the next watch's pipe reuses: the watch must not forward to its own pipe (it would read
    its own bytes back, and take a signal an inner watch's handler took as its own, then never
    report the next one nobody took: the unit suite's flaky failure), nor give that number back."""
    before = signal.set_wakeup_fd(-1)
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write)
    os.close(read)
    os.close(write)  # closed, still set
    outer_blocked, inner_blocked = Recorder(), Recorder()
    outer = SignalWatch([TERM], outer_blocked, grace_s=0.3)
    inner = SignalWatch([TERM], inner_blocked, grace_s=60)
    try:
        outer.arm()
        assert _wakeup_fd() == write, "precondition: the watch's pipe reuses the closed fd's number"
        _taken_inside_then_by_nobody(handlers, inner, outer_blocked)
        outer.disarm()
        assert _wakeup_fd() == -1, "the closed fd's number is not given back"
    finally:
        inner.disarm()
        outer.disarm()
        signal.set_wakeup_fd(before)
    assert [s for s, _ in outer_blocked.calls] == [TERM] and inner_blocked.calls == []


def test_out_of_order_a_reused_fd_number_is_not_given_back(handlers: list[int]) -> None:
    """As above, but before the second watch disarms a new pipe (open, non-blocking: a valid wakeup
    fd) reuses the first watch's fd number: the second gives back the fd set before both, not that
    unrelated pipe (the first watch handed its own `previous` over when it disarmed)."""
    before = signal.set_wakeup_fd(-1)
    first, second = SignalWatch([TERM], Recorder()), SignalWatch([TERM], Recorder())
    read = write = -1
    try:
        first.arm()
        firsts = _wakeup_fd()
        second.arm()
        first.disarm()
        read, write = os.pipe()
        os.set_blocking(write, False)
        assert write == firsts, "precondition: the new pipe reuses the first watch's fd number"
        second.disarm()
        assert _wakeup_fd() == -1, "the fd set before both is back, not the unrelated pipe"
    finally:
        first.disarm()
        second.disarm()
        signal.set_wakeup_fd(before)
        for fd in (read, write):
            if fd != -1:
                os.close(fd)


def test_a_later_fd_closed_by_its_owner_is_not_given_back(handlers: list[int]) -> None:
    """A wakeup fd set before the watch armed (asyncio's) whose owner closed it meanwhile: the watch
    gives back none, instead of leaving its own pipe, closed, set."""
    before = signal.set_wakeup_fd(-1)
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write)
    watch = SignalWatch([TERM], Recorder())
    try:
        watch.arm()
        os.close(read)
        os.close(write)  # its owner is gone
        watch.disarm()
        assert _wakeup_fd() == -1, "none given back, and the watch's own closed pipe not left set"
    finally:
        watch.disarm()
        signal.set_wakeup_fd(before)
