"""How a lifecycle fails (lifecycle.engine._failures), decision by decision: what a failed entry work
logs and raises, the forced FAIL and what the phases are told, a second signal while the release
runs, the signal handlers put back, and the release refused from the wrong thread. Real signals sent
to this process, in-process phases (no torch); tests/unit/test_engine_signals.py and
test_engine_failures.py show the same behaviours end to end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from lifecycle import (
    ConfigError,
    InProcessPhases,
    PhaseFailed,
    RehearsalError,
    Runtime,
    StartupAborted,
)
from lifecycle.engine import shut_down_open
from lifecycle.log import LogDir, records
from lifecycle.testing import SignalTrap, track
from states import State

SECRET = "hf_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6"  # the shape of a Hugging Face token


def events_of(lc: Any, name: str) -> list[dict[str, Any]]:
    return [r for r in lc.records if r["event"] == name]


class Raises(InProcessPhases):
    """Entry work of `phase` raises `error`; `failed` records what the phases were told."""

    def __init__(self, phase: str, error: BaseException) -> None:
        super().__init__()
        self.phase, self.error = phase, error
        self.told: list[tuple[str, str]] = []

    def _maybe_fail(self, name: str) -> None:
        super()._maybe_fail(name)
        if name == self.phase:
            raise self.error

    def failed(self, runtime: Runtime, state: str, reason: str) -> None:
        self.told.append((state, reason))


# -- entry work that raises ----------------------------------------------------------------------------
def test_an_error_in_entry_work_is_logged_redacted_and_raised_as_phase_failed_with_the_way_out(make_lc: Any) -> None:
    phases = Raises("build_model", RuntimeError(f"download failed with token {SECRET}"))
    lc = make_lc(phases=phases)
    lc.advance_to(State.DISTRIBUTED)
    with pytest.raises(PhaseFailed) as caught:
        lc.build_model()
    assert str(caught.value).startswith("build_model failed in DISTRIBUTED: RuntimeError: download failed with token ")
    assert str(caught.value).endswith(" The lifecycle is now FAILED; call restart() or shutdown().")
    assert SECRET not in str(caught.value)
    assert (caught.value.state, caught.value.trigger.value) == (State.DISTRIBUTED, "build_model")
    assert caught.value.__cause__ is phases.error
    [failed] = events_of(lc, "transition_failed")
    assert (failed["trigger"], failed["source"], failed["error_type"]) == ("build_model", "DISTRIBUTED", "RuntimeError")
    assert SECRET not in failed["error"] and failed["error"].startswith("download failed with token ")
    assert failed["duration_s"] >= 0.0
    assert events_of(lc, "startup_aborted") == []
    assert lc.state is State.FAILED and lc.records[-1]["reason"] == "build_model: RuntimeError"
    assert phases.told == [("DISTRIBUTED", "build_model: RuntimeError")]


def test_the_forced_fail_is_logged_as_a_fail_transition_from_where_it_happened(make_lc: Any) -> None:
    lc = make_lc(phases=Raises("start_services", ValueError("no tokenizer")))
    lc.validate()
    with pytest.raises(PhaseFailed):
        lc.start_services()
    started = [(r["trigger"], r["source"]) for r in events_of(lc, "transition_started")]
    completed = [(r["trigger"], r["source"], r["dest"]) for r in events_of(lc, "transition_completed")]
    assert started[-2:] == [("start_services", "VALIDATED"), ("fail", "VALIDATED")]
    assert completed[-1] == ("fail", "VALIDATED", "FAILED")
    assert events_of(lc, "transition_completed")[-1]["duration_s"] == 0.0, "the forced FAIL does no work"


def test_a_failure_before_validation_says_no_restart_can_help(make_lc: Any) -> None:
    lc = make_lc(phases=Raises("validate", ValueError("bad")))
    with pytest.raises(
        PhaseFailed,
        match=r"validate failed in CONFIGURED: ValueError: bad\. The lifecycle is FAILED "
        r"with nothing validated, so restart\(\) cannot help",
    ):
        lc.validate()


def test_a_lifecycle_error_keeps_its_type_and_fields_with_the_way_out_added(make_lc: Any) -> None:
    error = ConfigError("model.num_layers must be positive", field="model.num_layers", problems=["-1"])
    lc = make_lc(phases=Raises("start_services", error))
    lc.validate()
    with pytest.raises(ConfigError) as caught:
        lc.start_services()
    assert type(caught.value) is ConfigError and caught.value is not error and caught.value.__cause__ is error
    assert str(caught.value) == (
        "model.num_layers must be positive The lifecycle is now FAILED; call restart() or shutdown()."
    )
    assert (caught.value.field, caught.value.problems) == ("model.num_layers", ["-1"])
    assert events_of(lc, "transition_failed")[0]["error_type"] == "ConfigError"


class Interrupt(BaseException):
    """Not an Exception: what a wrapper's control flow raises (it must pass through unchanged)."""


def test_a_base_exception_passes_through_unchanged_and_the_lifecycle_still_fails(make_lc: Any) -> None:
    error = Interrupt("restart now")
    lc = make_lc(phases=Raises("start_services", error))
    lc.validate()
    with pytest.raises(Interrupt) as caught:
        lc.start_services()
    assert caught.value is error and lc.state is State.FAILED
    assert events_of(lc, "transition_failed")[0]["error_type"] == "Interrupt"


def test_the_phases_are_told_of_the_failure_and_their_own_error_does_not_hide_it(make_lc: Any) -> None:
    class Deaf(Raises):
        def failed(self, runtime: Runtime, state: str, reason: str) -> None:
            raise RuntimeError("the store is gone")

    lc = make_lc(phases=Deaf("build_model", RuntimeError("oom")))
    lc.advance_to(State.DISTRIBUTED)
    with pytest.raises(PhaseFailed, match="oom"):
        lc.build_model()
    assert lc.state is State.FAILED


def test_a_user_fail_is_told_to_the_phases_with_the_reason_redacted(make_lc: Any) -> None:
    phases = Raises("never", RuntimeError())
    lc = make_lc(phases=phases)
    lc.advance_to(State.DISTRIBUTED)
    lc.fail(f"gave up, token {SECRET}")
    assert len(phases.told) == 1 and phases.told[0][0] == "DISTRIBUTED" and SECRET not in phases.told[0][1]


# -- where the first failure's record goes -------------------------------------------------------------
def test_a_failure_before_the_log_opened_opens_it_to_record_the_failure(make_lc: Any, tmp_path: Path) -> None:
    lc = make_lc(phases=Raises("validate", ValueError("bad")), log_dir=tmp_path / "fresh")
    with pytest.raises(PhaseFailed) as caught:
        lc.validate()
    assert "stderr" not in str(caught.value) and lc.log_path == tmp_path / "fresh" / "rank-00000.jsonl"
    assert b'"transition_failed"' in lc.log_path.read_bytes()


def test_without_a_log_dir_a_failure_adds_nothing_about_the_log(make_lc: Any) -> None:
    lc = make_lc(phases=Raises("validate", ValueError("bad")))
    lc._shared.log_dir = LogDir(None)
    with pytest.raises(PhaseFailed) as caught:
        lc.validate()
    assert str(caught.value).endswith("create a new Lifecycle with it.")


def test_a_log_dir_held_by_another_run_sends_the_failure_to_stderr_naming_the_holder(
    make_lc: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    other = make_lc(log_dir=tmp_path / "held")
    other.validate()  # another live lifecycle, another run id: holds the directory
    lc = make_lc(phases=Raises("validate", ValueError("bad")), log_dir=tmp_path / "held")
    with pytest.raises(PhaseFailed) as caught:
        lc.validate()
    said = str(caught.value)
    assert "ValueError: bad" in said, "the failure itself comes first"
    assert said.endswith(
        "The startup log went to stderr as JSON lines, because logging.log_dir cannot take it: "
        f"log_dir {str(tmp_path / 'held')!r} is in use by run {other.run_id!r} on host {socket.gethostname()!r} "
        f"(pid {os.getpid()}; .lifecycle.lock): two runs cannot write one log directory at once; wait for that "
        "run to end, or choose another log directory."
    ), "the directory's problem is not above: this failure is another one"
    assert '"transition_failed"' in capfd.readouterr().err


def test_a_log_dir_refused_at_validate_is_named_once_with_the_log_sent_to_stderr(
    make_lc: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    other = make_lc(log_dir=tmp_path / "held")
    other.validate()
    lc = make_lc(log_dir=tmp_path / "held")
    with pytest.raises(ConfigError) as caught:
        lc.validate()
    said = str(caught.value)
    assert caught.value.field == "logging.log_dir" and said.count(f"is in use by run {other.run_id!r}") == 1
    assert said.endswith("because logging.log_dir cannot take it (above).")
    assert '"transition_failed"' in capfd.readouterr().err


def test_a_log_file_that_cannot_be_created_sends_the_failure_to_stderr_naming_it(
    make_lc: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "logs" / "rank-00000.jsonl").mkdir(parents=True)  # no file can be made under that name
    lc = make_lc(phases=Raises("validate", ValueError("bad")), log_dir=tmp_path / "logs")
    lc._shared.log.claim = lambda *_: None  # type: ignore[method-assign]  # the directory itself is fine
    with pytest.raises(PhaseFailed) as caught:
        lc.validate()
    assert (
        f"The startup log went to stderr as JSON lines: {tmp_path / 'logs' / 'rank-00000.jsonl'} cannot be "
        "written (" in str(caught.value)
    )
    assert '"transition_failed"' in capfd.readouterr().err


# -- signals -------------------------------------------------------------------------------------------
class SignalledTwice(InProcessPhases):
    """SIGTERM from inside build_model, and again from inside the release that the abort runs."""

    def __init__(self) -> None:
        super().__init__()
        self.released = 0
        self.around(State.MODEL_BUILT, enter=self._signalled)
        self.around(State.DISTRIBUTED, release=self._releasing)  # the newest state the abort releases

    def _signalled(self, ctx: Any, enter: Any) -> Runtime:
        os.kill(os.getpid(), signal.SIGTERM)
        runtime: Runtime = enter(ctx)
        return runtime

    def _releasing(self, ctx: Any, release: Any) -> Runtime:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        self.released += 1
        runtime: Runtime = release(ctx)
        return runtime


def test_a_second_signal_while_the_abort_releases_is_ignored_and_the_release_finishes(make_lc: Any) -> None:
    previous = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    phases = SignalledTwice()
    lc = make_lc(phases=phases)
    with pytest.raises(StartupAborted) as caught:
        lc.advance_to(State.CALLBACKS_BOUND)
    assert caught.value.code == 128 + signal.SIGTERM and "SIGTERM in state DISTRIBUTED" in str(caught.value)
    assert lc.state is State.SHUT_DOWN and phases.released == 1 and not lc.runtime.distributed
    [aborted] = events_of(lc, "startup_aborted")
    assert (aborted["signal"], aborted["state"], aborted["trigger"]) == ("SIGTERM", "DISTRIBUTED", "build_model")
    assert events_of(lc, "transition_failed") == []
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == previous


def test_a_signal_while_no_startup_runs_is_left_to_the_users_handler(make_lc: Any) -> None:
    got: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: got.append(signum))
    try:
        lc = make_lc()
        lc.advance_to(State.CALLBACKS_BOUND)
        os.kill(os.getpid(), signal.SIGTERM)
        assert got == [signal.SIGTERM] and lc.state is State.CALLBACKS_BOUND
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_signal_during_a_plain_shutdown_is_raised_after_the_release(make_lc: Any) -> None:
    def interrupted(ctx: Any, release: Any) -> Runtime:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        runtime: Runtime = release(ctx)
        return runtime

    lc = make_lc(phases=InProcessPhases().around(State.CALLBACKS_BOUND, release=interrupted))
    lc.advance_to(State.CALLBACKS_BOUND)
    with pytest.raises(StartupAborted) as caught:
        lc.shutdown()
    assert caught.value.code == 128 + signal.SIGTERM, "the first signal held names the exit"
    assert lc.state is State.SHUT_DOWN and events_of(lc, "startup_aborted") == []


def test_a_user_handler_the_release_put_back_itself_stays(make_lc: Any) -> None:
    def mine(_signum: int, _frame: Any) -> None:
        return None

    previous = signal.getsignal(signal.SIGINT)

    def restoring(ctx: Any, release: Any) -> Runtime:
        signal.signal(signal.SIGINT, mine)
        runtime: Runtime = release(ctx)
        return runtime

    try:
        lc = make_lc(phases=InProcessPhases().around(State.CALLBACKS_BOUND, release=restoring))
        lc.advance_to(State.CALLBACKS_BOUND)
        lc.shutdown()
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_shutdown_on_another_thread_holds_no_signal_and_keeps_the_handlers(make_lc: Any) -> None:
    lc = make_lc()
    lc.advance_to(State.CALLBACKS_BOUND)
    before = signal.getsignal(signal.SIGTERM)
    errors: list[BaseException] = []

    def shut() -> None:
        try:
            lc.shutdown()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=shut)
    thread.start()
    thread.join()
    assert errors == [] and lc.state is State.SHUT_DOWN and signal.getsignal(signal.SIGTERM) is before


def test_an_abort_after_shutdown_changes_nothing(make_lc: Any) -> None:
    lc = make_lc()
    lc.advance_to(State.CALLBACKS_BOUND)
    lc.shutdown()
    count = len(lc.records)
    lc._failures.abort(StartupAborted(signal.SIGTERM, state="SHUT_DOWN", trigger=None))
    assert len(lc.records) == count and lc.state is State.SHUT_DOWN


def test_the_signal_trap_installs_once_and_puts_back_what_was_there() -> None:
    def handler(_signum: int, _frame: Any) -> None:
        return None

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    trap, other = SignalTrap(handler, lambda *_: None), SignalTrap(lambda *_: None, lambda *_: None)
    trap.install()
    try:
        assert signal.getsignal(signal.SIGTERM) is handler and signal.getsignal(signal.SIGINT) is handler
        trap.install()  # again: what was there before the first install is still what comes back
        assert trap.previous == before
    finally:
        trap.uninstall()
    assert {sig: signal.getsignal(sig) for sig in before} == before and trap.previous == {}
    other.uninstall()  # never installed: nothing to put back
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_the_signal_trap_does_nothing_off_the_main_thread() -> None:
    def handler(_signum: int, _frame: Any) -> None:
        return None

    trap = SignalTrap(handler, lambda *_: None)
    done: list[bool] = []
    thread = threading.Thread(target=lambda: (trap.install(), done.append(trap.previous == {})))
    thread.start()
    thread.join()
    assert done == [True] and signal.getsignal(signal.SIGTERM) is not handler
    trap.install()
    try:
        thread = threading.Thread(target=lambda: (trap.uninstall(), done.append(bool(trap.previous))))
        thread.start()
        thread.join()
        assert done == [True, True] and signal.getsignal(signal.SIGTERM) is handler
    finally:
        trap.uninstall()


# -- the lifecycles left open at exit ------------------------------------------------------------------
def test_lifecycles_left_open_are_shut_down_at_exit_and_their_errors_swallowed(make_lc: Any) -> None:
    lc = make_lc()
    lc.advance_to(State.CALLBACKS_BOUND)
    done = make_lc()
    done.shutdown()
    calls: list[str] = []

    class Open:
        def __init__(self, state: State, error: BaseException | None = None) -> None:
            self.state, self.error = state, error

        def shutdown(self) -> None:
            calls.append(self.state.name)
            if self.error is not None:
                raise self.error

    items = [Open(State.DISTRIBUTED, KeyboardInterrupt()), Open(State.FAILED, RuntimeError()), Open(State.SHUT_DOWN)]
    for item in items:
        track(item)
    shut_down_open()
    assert lc.state is State.SHUT_DOWN and sorted(calls) == ["DISTRIBUTED", "FAILED"]


# -- releases from the wrong thread --------------------------------------------------------------------
class Rehearsal:
    def __init__(self, thread_id: int | None, *, active: bool = True, owner_alive: bool = True) -> None:
        self.thread_id, self.active, self.owner_alive = thread_id, active, owner_alive


class Bare:
    """A rehearsal that says only which thread started it: not active, so nothing to refuse."""

    def __init__(self, thread_id: int) -> None:
        self.thread_id = thread_id


class Unsure(Bare):
    """Active, but it cannot tell whether its thread still lives: taken as alive, so refused."""

    active = True


@pytest.mark.parametrize(
    ("rehearsal", "refused"),
    [
        (Rehearsal(1), True),
        (Rehearsal(1, owner_alive=False), False),
        (Rehearsal(1, active=False), False),
        (Rehearsal(None), False),
        (Rehearsal(threading.get_ident()), False),
        (None, False),
        (Bare(1), False),
        (Unsure(1), True),
    ],
)
def test_a_release_from_another_thread_than_the_rehearsals_is_refused_before_anything_changes(
    make_lc: Any, rehearsal: Any, refused: bool
) -> None:
    lc = make_lc()
    lc.advance_to(State.CALLBACKS_BOUND)
    lc._shared.runtime = dataclasses.replace(lc.runtime, rehearsal=rehearsal)
    if refused:
        for trigger in ("restart", "shutdown"):
            with pytest.raises(RehearsalError) as caught:
                getattr(lc, trigger)()
            assert str(caught.value).startswith(
                f"{trigger}() refused on thread {threading.get_ident()}: the CPU rehearsal was started on thread 1 "
                f"(the one that ran init_distributed) and can only be closed there. Call {trigger}() from that "
                "thread; nothing was released or changed."
            )
            assert caught.value.thread_id == 1 and lc.state is State.CALLBACKS_BOUND
        lc._shared.runtime = dataclasses.replace(lc.runtime, rehearsal=None)
    lc.restart()
    assert lc.state is State.VALIDATED


def test_only_releases_are_refused_on_the_wrong_thread(make_lc: Any) -> None:
    lc = make_lc()
    lc.advance_to(State.MODEL_BUILT)
    lc._shared.runtime = dataclasses.replace(lc.runtime, rehearsal=Rehearsal(1))
    lc.advance_to(State.CALLBACKS_BOUND)  # forward steps are not refused
    lc.rebuild()
    assert lc.state is State.DISTRIBUTED
    lc._shared.runtime = dataclasses.replace(lc.runtime, rehearsal=None)


# -- a log that cannot be written ----------------------------------------------------------------------
def test_a_log_that_fails_is_reported_once_however_many_records_follow(
    make_lc: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from test_engine_failures import disk_full_after

    lc = make_lc()
    lc.advance_to(State.CALLBACKS_BOUND)
    for step in (1, 2):
        lc.record(records.StepCompleted(step=step, loss=1.0, duration_s=0.1))  # many checks, no fault yet
    assert lc.state is State.CALLBACKS_BOUND

    disk_full_after(monkeypatch, 0)  # the log file's writes fail from now on; stderr's still work
    for step in (3, 4, 5):
        lc.record(records.StepCompleted(step=step, loss=1.0, duration_s=0.1))
    monkeypatch.undo()
    assert lc.state is State.FAILED
    lc.shutdown()
    failed = [line for line in capfd.readouterr().err.splitlines() if '"transition_failed"' in line]
    assert len(failed) == 1 and '"trigger":"record"' in failed[0] and '"duration_s":0.0' in failed[0]


# -- at interpreter exit -------------------------------------------------------------------------------
def test_a_script_that_returns_without_shutdown_is_shut_down_at_exit(tmp_path: Path) -> None:
    import subprocess
    import sys

    from lifecycle.testing import read_log

    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from lifecycle import InProcessPhases, Lifecycle, RunConfig\n"
        "from states import State\n"
        "lc = Lifecycle(RunConfig(), log_dir=Path(sys.argv[1]), phases=InProcessPhases(), tripwires='off')\n"
        "lc.advance_to(State.CALLBACKS_BOUND)\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True, env=env, timeout=120)
    records = read_log(tmp_path / "rank-00000.jsonl")
    assert records[-1]["event"] == "transition_completed" and records[-1]["dest"] == "SHUT_DOWN"


class TwoSignalsAtOnce(InProcessPhases):
    """SIGINT and SIGTERM arrive together inside build_model (both pending when unblocked)."""

    def __init__(self) -> None:
        super().__init__()
        self.around(State.MODEL_BUILT, enter=self._both)

    def _both(self, ctx: Any, enter: Any) -> Runtime:
        both = {signal.SIGINT, signal.SIGTERM}
        # Sent to this thread (`raise_signal`), not to the process: another thread (the signal
        # watch's) would take a process-directed one at once, and the two would not be pending
        # together. Both are delivered at the unblock, SIGINT first; the mask comes back whatever
        # the handlers raise, or every process this test session starts later inherits it.
        signal.pthread_sigmask(signal.SIG_BLOCK, both)
        try:
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGTERM)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, both)
        runtime: Runtime = enter(ctx)
        return runtime


def test_a_second_signal_right_behind_the_first_is_ignored_while_the_abort_unwinds(make_lc: Any) -> None:
    lc = make_lc(phases=TwoSignalsAtOnce())
    with pytest.raises(StartupAborted) as caught:
        lc.advance_to(State.CALLBACKS_BOUND)
    assert caught.value.code == 128 + signal.SIGINT, "the first signal decides the exit"
    assert [r["signal"] for r in events_of(lc, "startup_aborted")] == ["SIGINT"]
    assert lc.state is State.SHUT_DOWN


def open_fds() -> int:
    """Open descriptors other than pipes (the signal watch's pipe comes and goes with its startup)."""
    fds = "/proc/self/fd"
    targets = []
    for fd in os.listdir(fds):
        with contextlib.suppress(OSError):
            targets.append(os.readlink(f"{fds}/{fd}"))
    return sum(not t.startswith("pipe:") for t in targets)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs Linux's /proc")
def test_a_failure_after_the_log_opened_does_not_open_it_again(make_lc: Any) -> None:
    lc = make_lc(phases=Raises("build_model", RuntimeError("oom")))
    lc.advance_to(State.DISTRIBUTED)
    before = open_fds()
    with pytest.raises(PhaseFailed) as caught:
        lc.build_model()
    assert open_fds() == before and "stderr" not in str(caught.value)


# -- a signal the blocked main thread cannot take ------------------------------------------------------
def test_the_trap_claims_a_signal_only_while_its_own_handler_is_installed() -> None:
    def handler(_signum: int, _frame: Any) -> None:
        return None

    trap = SignalTrap(handler, lambda *_: None)
    assert not trap.watch.owns(signal.SIGTERM), "not installed: the handler there now is someone else's"
    trap.install()
    try:
        assert trap.watch.owns(signal.SIGTERM) and trap.watch.owns(signal.SIGINT)
        signal.signal(signal.SIGTERM, lambda *_: None)  # a later lifecycle's, or the user's
        assert not trap.watch.owns(signal.SIGTERM) and trap.watch.owns(signal.SIGINT)
    finally:
        trap.uninstall()


def test_a_blocked_signal_reported_while_an_abort_runs_changes_nothing(make_lc: Any) -> None:
    lc = make_lc()
    lc.advance_to(State.SERVICES_READY)
    lc._failures.aborting = True  # the main thread took a signal after all
    count = len(lc.records)
    lc._failures.on_signal_blocked(signal.SIGTERM, 5.0)  # returns: the process is not ended
    assert len(lc.records) == count and lc.state is State.SERVICES_READY


BLOCKED_REPORT = """
import signal, sys
from lifecycle import InProcessPhases, Lifecycle, RunConfig
from lifecycle.log.records import StartupAborted
from states import State, Trigger

lc = Lifecycle(RunConfig(), None, sys.argv[1], phases=InProcessPhases(), tripwires="off")
lc.advance_to(State.SERVICES_READY)
if sys.argv[2] == "during":
    lc._shared.active = Trigger.INIT_DISTRIBUTED  # its entry work sits in native code
write = lc._shared.log.write

def write_then_handler_runs(record):
    write(record)
    if isinstance(record, StartupAborted):  # the main thread runs its handler just now: it must be ignored
        try:
            lc._failures.on_signal(signal.SIGINT, None)
        except BaseException as exc:
            print("OBEYED", type(exc).__name__, flush=True)
        else:
            print("IGNORED", flush=True)

lc._shared.log.write = write_then_handler_runs
lc._failures.on_signal_blocked(int(sys.argv[3]), 12.345)
print("RETURNED", flush=True)
"""


def test_a_signal_the_blocked_main_thread_cannot_take_is_logged_said_and_ends_the_process(tmp_path: Path) -> None:
    """The signal watch's report, called directly in a child (it ends the process): the record with
    `blocked_s`, the line on stderr, the exit 128 + N, and the main thread's handler ignored once
    the report began. tests/unit/test_signal_watch.py runs the whole way with a real blocked thread."""
    import subprocess
    import sys

    from lifecycle.testing import read_log

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    cases = {"during": signal.SIGTERM, "between": signal.SIGINT}
    children = {
        name: subprocess.Popen(
            [sys.executable, "-c", BLOCKED_REPORT, str(tmp_path / name), name, str(int(signum))],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, signum in cases.items()
    }
    done = {name: (child, *child.communicate(timeout=120)) for name, child in children.items()}
    for name, (child, out, err) in done.items():
        signum = cases[name]
        assert child.returncode == 128 + signum, (name, out, err)
        assert out == "IGNORED\n", "a handler running after the report began does nothing; the process ends"
        during = " during init_distributed()" if name == "during" else ""
        assert err.splitlines()[-1] == (
            f"lifecycle: rank 0: startup aborted by {signal.Signals(signum).name} in state SERVICES_READY{during}; "
            "its main thread was blocked in native code for 12 s, so the process ends without the releases "
            f"(exit {128 + signum})."
        ), name
        last = read_log(tmp_path / name / "rank-00000.jsonl")[-1]
        assert (last["event"], last["signal"], last["state"], last["blocked_s"]) == (
            "startup_aborted",
            signal.Signals(signum).name,
            "SERVICES_READY",
            12.3,
        )
        assert last["trigger"] == ("init_distributed" if name == "during" else None)
