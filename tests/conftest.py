from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from lifecycle import InProcessPhases, Lifecycle, RunConfig
from lifecycle.engine import open_lifecycles
from states import State

# Every log the suite writes, also by its spawned ranks (they inherit it), is checked against lifecycle/log/schema.py.
os.environ.setdefault("LIFECYCLE_STRICT_RECORDS", "1")


@pytest.fixture
def make_lc(tmp_path: Path) -> Iterator[object]:
    """Factory for in-process lifecycles that are shut down after the test."""
    made: list[Lifecycle] = []

    def make(
        *,
        plan: str | None = None,
        phases: object = None,
        tripwires: str = "raise",
        provider: object = None,
        config: RunConfig | None = None,
        log_dir: Path | None = None,
    ) -> Lifecycle:
        lc = Lifecycle(
            config or RunConfig(),
            provider,
            log_dir or tmp_path / "logs",
            plan=plan,
            phases=phases or InProcessPhases(),
            tripwires=tripwires,  # type: ignore[arg-type]
            options={"keep_records": True},
        )
        made.append(lc)
        return lc

    yield make
    for lc in made:
        if lc.state is not State.SHUT_DOWN:
            lc.shutdown()


@pytest.fixture(autouse=True)
def _signal_mask_left_as_found() -> Iterator[None]:
    """A test that leaves signals blocked on the main thread hands that mask to every process the
    session starts later (it survives fork and exec): their SIGTERM tests then hang. It fails here."""
    import signal

    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    after = signal.pthread_sigmask(signal.SIG_SETMASK, before)
    assert after == before, f"the test left signals blocked: {sorted(signal.Signals(s).name for s in after - before)}"


@pytest.fixture(autouse=True)
def _no_closed_wakeup_fd_left_set() -> Iterator[None]:
    """A test (or the lifecycles it leaves open, shut down by the fixture below, which tears down
    first) that leaves the wakeup fd set to a closed fd loses every later test's signal bytes, and a
    later signal watch whose pipe reuses that number fed itself (the unit suite's flaky failure). It
    fails here, and the fd set before the test is put back."""
    import signal

    before = signal.set_wakeup_fd(-1)
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(before)
    yield
    after = signal.set_wakeup_fd(-1)
    closed = False
    if after != -1:
        try:
            os.fstat(after)
        except OSError:
            closed = True
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(after if not closed else before)
    assert not closed, f"the test left the wakeup fd set to {after}, a closed fd"


@pytest.fixture(autouse=True)
def _signal_handlers_put_back() -> Iterator[None]:
    """The SIGINT/SIGTERM handlers in place before each test are put back after it (and after the
    lifecycles it left open are shut down, the fixture below, which depends on this one). A test
    that installed a handler of its own and kept it (a lambda standing for the user's), or a
    lifecycle shut down on another thread, which cannot take its handlers off, handed them to every
    later lifecycle as the handler before its own: a later test's Ctrl-C while training then went
    to that stale chain and raised nothing (test_engine_signals' KeyboardInterrupt test, only after
    other files had run)."""
    import signal

    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    yield
    if threading.current_thread() is threading.main_thread():
        for signum, handler in before.items():
            if handler is not None and signal.getsignal(signum) is not handler:
                signal.signal(signum, handler)


@pytest.fixture(autouse=True)
def _lifecycles_left_open_are_shut_down(_signal_handlers_put_back: None) -> Iterator[None]:
    """A lifecycle a test left mid-startup keeps its SIGTERM/SIGINT handlers and signal watch armed
    for the rest of the session: a later test's signal, taken by that test's own handler, could reach
    the old watch, which would then end the whole pytest process with 130 three seconds later. Each
    test's lifecycles are shut down after it, as interpreter exit would."""
    before = {id(lc) for lc in open_lifecycles()}
    yield
    for lc in open_lifecycles():
        if id(lc) not in before and lc.state is not State.SHUT_DOWN:
            with contextlib.suppress(Exception):
                lc.shutdown()
