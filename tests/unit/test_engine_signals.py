"""A real SIGTERM (what torchrun, scancel and Kubernetes send) delivered while entry work runs: the
lifecycle logs `startup_aborted` once, releases everything in reverse order, and the process exits
with 128 + SIGTERM. In-process phases, so no torch: the signal is real, the work is simulated."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from lifecycle import InProcessPhases, Runtime, StartupAborted
from states import State


class SignalledDuring(InProcessPhases):
    """Sends this process a real SIGTERM from inside one phase's entry work."""

    def __init__(self, phase: str) -> None:
        super().__init__()
        self.phase = phase

    def _maybe_fail(self, name: str) -> None:
        super()._maybe_fail(name)
        if name == self.phase:
            os.kill(os.getpid(), signal.SIGTERM)


def _events(lc: Any, name: str) -> list[dict[str, Any]]:
    return [r for r in lc.records if r["event"] == name]


@pytest.mark.parametrize("phase", ["start_services", "init_distributed", "build_model"])
def test_a_sigterm_during_entry_work_aborts_once_releases_everything_and_exits_143(make_lc: Any, phase: str) -> None:
    previous = signal.getsignal(signal.SIGTERM)
    lc = make_lc(phases=SignalledDuring(phase))
    with pytest.raises(StartupAborted) as info:
        lc.advance_to(State.CALLBACKS_BOUND)
    assert info.value.code == 128 + signal.SIGTERM
    assert lc.state is State.SHUT_DOWN, "the abort released everything"
    [aborted] = _events(lc, "startup_aborted")
    assert aborted["signal"] == "SIGTERM" and aborted["trigger"] == phase
    assert _events(lc, "lifecycle_shutdown"), "the releases ran and were logged"
    rt: Runtime = lc.runtime
    assert rt.model is None and not rt.distributed and not rt.services_ready
    assert signal.getsignal(signal.SIGTERM) == previous, "the user's handler is back"


def test_a_sigterm_between_transitions_aborts_and_releases_too(make_lc: Any) -> None:
    lc = make_lc(phases=InProcessPhases())
    lc.advance_to(State.DISTRIBUTED)
    with pytest.raises(StartupAborted):  # the handler stays installed while the startup is under way
        os.kill(os.getpid(), signal.SIGTERM)
    assert lc.state is State.SHUT_DOWN
    assert len(_events(lc, "startup_aborted")) == 1


class InterruptedRelease(InProcessPhases):
    """Sends this process a real SIGINT (Ctrl-C) from inside the shutdown's release."""

    def __init__(self) -> None:
        super().__init__()
        self.around(State.CALLBACKS_BOUND, release=self.interrupted)

    def interrupted(self, ctx: Any, release: Any) -> Runtime:
        os.kill(os.getpid(), signal.SIGINT)
        return release(ctx)  # type: ignore[no-any-return]


def test_ctrl_c_during_shutdown_finishes_the_release_then_exits_130(make_lc: Any) -> None:
    previous = signal.getsignal(signal.SIGINT)
    lc = make_lc(phases=InterruptedRelease())
    lc.advance_to(State.CALLBACKS_BOUND)
    with pytest.raises(StartupAborted) as info:
        lc.shutdown()
    assert info.value.code == 130 and "SIGINT in state SHUT_DOWN during shutdown()" in str(info.value)
    assert lc.state is State.SHUT_DOWN and lc.runtime.model is None and not lc.runtime.distributed
    assert _events(lc, "lifecycle_shutdown") and not _events(lc, "transition_failed")
    assert signal.getsignal(signal.SIGINT) == previous, "the user's handler is back"
    assert lc.shutdown() is lc.runtime  # done: a second call is a no-op
