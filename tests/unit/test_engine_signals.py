"""A real SIGTERM (what torchrun, scancel and Kubernetes send) delivered while entry work runs: the
lifecycle logs `startup_aborted` once, releases everything in reverse order, and the process exits
with 128 + SIGTERM. In-process phases, so no torch: the signal is real, the work is simulated.

The signals this process sends itself go to its main thread (`signal.raise_signal`), whose handler
then runs before the call returns (`os.kill` to the process lets the kernel pick any thread that does
not block it). A handler an earlier test left installed would take the signal instead (the
KeyboardInterrupt test would see nothing raised): tests/conftest.py puts the handlers back after
each test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lifecycle import InProcessPhases, Runtime, StartupAborted
from lifecycle.audit import audit
from lifecycle.testing import attempts, check_log, read_log
from states import State


class SignalledDuring(InProcessPhases):
    """Sends this process a real SIGTERM from inside one phase's entry work."""

    def __init__(self, phase: str) -> None:
        super().__init__()
        self.phase = phase

    def _maybe_fail(self, name: str) -> None:
        super()._maybe_fail(name)
        if name == self.phase:
            signal.raise_signal(signal.SIGTERM)


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
        signal.raise_signal(signal.SIGTERM)
    assert lc.state is State.SHUT_DOWN
    assert len(_events(lc, "startup_aborted")) == 1


class InterruptedRelease(InProcessPhases):
    """Sends this process a real SIGINT (Ctrl-C) from inside the shutdown's release."""

    def __init__(self) -> None:
        super().__init__()
        self.around(State.CALLBACKS_BOUND, release=self.interrupted)

    def interrupted(self, ctx: Any, release: Any) -> Runtime:
        signal.raise_signal(signal.SIGINT)
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


# -- after the startup: a signal is the training's; the lifecycle logs it and hands it on ----------

TRAINING = """
import os, signal, sys, time
from lifecycle import InProcessPhases, Lifecycle, RunConfig
from states import State
log_dir, run_id, end = sys.argv[1], sys.argv[2], sys.argv[3]
attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
with Lifecycle(RunConfig(), log_dir=log_dir, phases=InProcessPhases(), tripwires="off", run_id=run_id) as lc:
    lc.advance_to(State.CALLBACKS_BOUND)
    if attempt == "0":
        print("training", flush=True)
        if end == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # the launcher's SIGTERM ends it
"""


def _rank(log_dir: Path, rank: int, end: str, attempt: int = 0) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "RANK": str(rank),
        "WORLD_SIZE": "2",
        "TORCHELASTIC_RESTART_COUNT": str(attempt),
    }
    command = [sys.executable, "-c", TRAINING, str(log_dir), "job", end]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("order", ["killed_first", "terminated_first"])
def test_a_sigterm_while_training_is_logged_and_ends_the_process_as_it_would_without_the_lifecycle(
    tmp_path: Path, order: str
) -> None:
    """torchrun's agent, seeing rank 1 SIGKILLed, SIGTERMs rank 0 before rank 0's watch noticed: rank 0
    logs `signal_received` and dies by SIGTERM as before. The audit names rank 1, whose log just
    stops, even when rank 0's record comes first (clocks of two nodes, or a kill the agent saw late)."""
    survivor = _rank(tmp_path, 0, "terminated")
    assert survivor.stdout is not None and survivor.stdout.readline() == "training\n"
    if order == "killed_first":
        assert _rank(tmp_path, 1, "killed").wait(timeout=120) == -signal.SIGKILL
    survivor.send_signal(signal.SIGTERM)
    assert survivor.wait(timeout=60) == -signal.SIGTERM, "the default action, as without the lifecycle"
    if order == "terminated_first":
        assert _rank(tmp_path, 1, "killed").wait(timeout=120) == -signal.SIGKILL
    [received] = [r for r in read_log(tmp_path / "rank-00000.jsonl") if r["event"] == "signal_received"]
    assert (received["signal"], received["state"]) == ("SIGTERM", "CALLBACKS_BOUND")
    for rank in (0, 1):  # torchrun starts both again, as attempt 1
        assert _rank(tmp_path, rank, "", attempt=1).wait(timeout=120) == 0
    [first, second] = attempts(audit([str(tmp_path)], jobs=1).ranks)
    assert (first.ranks, first.ended, first.cause_rank) == ((0, 1), True, 1)
    assert (second.ended, second.cause_rank) == (False, None)


def test_a_signal_while_training_goes_to_the_users_handler_after_one_record(make_lc: Any) -> None:
    got: list[int] = []

    def mine(signum: int, _frame: Any) -> None:
        got.append(signum)

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        lc = make_lc()
        lc.advance_to(State.CALLBACKS_BOUND)
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)
        assert got == [signal.SIGTERM, signal.SIGTERM] and lc.state is State.CALLBACKS_BOUND
        [received] = _events(lc, "signal_received")
        assert received["signal"] == "SIGTERM" and "blocked_s" not in received
        lc.shutdown()
        assert signal.getsignal(signal.SIGTERM) is mine, "the user's handler is back"
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_ctrl_c_while_training_is_logged_then_raises_keyboardinterrupt_as_usual(make_lc: Any) -> None:
    """Python's own SIGINT handler is installed here: a process started in the background without job
    control (`bash scripts/test &` from a script) starts with SIGINT ignored, and the lifecycle hands
    the signal on to whatever handler was there before it."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        lc = make_lc()
        lc.advance_to(State.CALLBACKS_BOUND)
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert [r["signal"] for r in _events(lc, "signal_received")] == ["SIGINT"]
    assert lc.state is State.CALLBACKS_BOUND and not _events(lc, "startup_aborted")


def test_ctrl_c_while_training_in_a_process_that_ignores_sigint_is_logged_and_stays_ignored(make_lc: Any) -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        lc = make_lc()
        lc.advance_to(State.CALLBACKS_BOUND)
        signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN, "the lifecycle's handler is in place"
        lc.shutdown()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN, "put back as it was"
    finally:
        signal.signal(signal.SIGINT, previous)
    assert [r["signal"] for r in _events(lc, "signal_received")] == ["SIGINT"]
    assert not _events(lc, "startup_aborted")


def test_a_forked_child_sigtermed_while_training_dies_as_usual_and_writes_nothing_to_the_log(make_lc: Any) -> None:
    """A data loader's worker forked while training inherits the lifecycle's handler; the loader's
    SIGTERM ends it by the default action, and the parent's log gets no record from it."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the handler before ours: the default
    try:
        lc = make_lc()
        lc.advance_to(State.CALLBACKS_BOUND)
        before = list(lc.records)
        status = _forked_and_sigtermed()
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
    lc.shutdown()
    path = Path(lc.log_path)
    assert [r["event"] for r in read_log(path)][: len(before)] == [r["event"] for r in before]
    assert not [r for r in read_log(path) if r["event"] == "signal_received"]
    assert check_log(read_log(path)) == []


def _forked_and_sigtermed() -> int:
    pid = os.fork()
    if pid == 0:  # the worker: SIGTERM, as DataLoader's shutdown sends a worker that did not exit
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    return status
