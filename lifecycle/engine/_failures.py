"""How a lifecycle fails: entry work that raises, a log that cannot be written, SIGTERM/SIGINT
during startup (and their record during training), a release from the wrong thread. Whatever
fails, the lifecycle ends in FAILED or SHUT_DOWN with a record saying where and why, and nothing it
created is left behind.

A part of `Lifecycle`; docs/failures.md says what each failure leaves behind.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
import weakref
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, Protocol

from lifecycle.engine._warnings import _console_line
from lifecycle.errors import LifecycleError, PhaseFailed, RehearsalError, StartupAborted
from lifecycle.log import records
from lifecycle.redaction import redact_text
from lifecycle.runtime import signals
from lifecycle.runtime.signals import SignalWatch
from states import State, Trigger, find

if TYPE_CHECKING:
    from lifecycle.engine._shared import Shared
    from lifecycle.runtime import Runtime

_SIGNALS = (signal.SIGTERM, signal.SIGINT)
Handler = Callable[[int, FrameType | None], object]
"""A Python signal handler (`signal.signal`'s)."""


class _Open(Protocol):
    """What the exit hook uses of a lifecycle."""

    @property
    def state(self) -> State: ...
    def shutdown(self) -> Runtime: ...


_OPEN: weakref.WeakSet[_Open] = weakref.WeakSet()
"""Every lifecycle not yet shut down in this process: `shut_down_open` releases them."""


def track(lifecycle: _Open) -> None:
    """Shut `lifecycle` down at interpreter exit if nobody did (a script that returns, a thread
    that ended with it open): its process group, parallel state and rehearsal are released."""
    _OPEN.add(lifecycle)


@atexit.register
def shut_down_open() -> None:
    """Shut down every tracked lifecycle not shut down yet, swallowing what each raises: what
    interpreter exit runs (registered with `atexit`)."""
    for lifecycle in list(_OPEN):
        if lifecycle.state is not State.SHUT_DOWN:
            with contextlib.suppress(BaseException):  # exiting anyway: release what can be released
                lifecycle.shutdown()


class SignalTrap:
    """SIGTERM/SIGINT handlers for the startup (main thread only; other threads cannot install
    them), and the watch that calls `on_blocked(signum, waited_s)` when the main thread, blocked
    in native code, cannot run them. The previous handlers come back when the startup fails or is
    shut down (after the target, `on_signal` logs a signal and hands it on: `Failures.pass_on`)."""

    def __init__(self, on_signal: Handler, on_blocked: Callable[[int, float], object]) -> None:
        self.on_signal = on_signal
        self.holding: Handler | None = None  # the shutdown's handler while it holds signals (`signals_held`)
        self.pid = os.getpid()  # the process that installed the handlers: a forked child inherits them
        self.previous: dict[int, Handler | int | None] = {}
        self.watch = SignalWatch(_SIGNALS, on_blocked, owns=self._owns)

    def _owns(self, signum: int) -> bool:
        """This trap's handler is the one installed for `signum` now (not a later lifecycle's)."""
        return bool(signal.getsignal(signum) == self.on_signal)

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        if not self.previous:
            self.pid = os.getpid()
            for sig in _SIGNALS:
                self.previous[sig] = signal.signal(sig, self.on_signal)
        self.watch.arm()  # again after the target (`Failures.settle`): a restart is a startup

    def uninstall(self) -> None:
        if not self.previous or threading.current_thread() is not threading.main_thread():
            return
        self.watch.disarm()
        for sig, handler in self.previous.items():
            if signal.getsignal(sig) in (self.on_signal, self.holding):  # else whoever replaced ours keeps theirs
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self.previous.clear()


class Failures:
    """A part of `Lifecycle`: what it does when something fails. Its own state: the reason of the
    FAIL being made, whether an abort is under way (and logged), whether the log's fault was seen,
    and the signal trap. `shutdown` and `move` are the driver's (`move` fires a trigger on the
    machine and logs its completion)."""

    def __init__(
        self, shared: Shared, *, shutdown: Callable[[], Runtime], move: Callable[[Trigger, State, float], None]
    ) -> None:
        self.shared = shared
        self._shutdown = shutdown
        self._move = move
        self.reason = ""
        self.aborting = self.abort_logged = self.fault_seen = False
        self.running = self.received_logged = False  # `running`: the startup reached its target
        self.trap = SignalTrap(self.on_signal, self.on_signal_blocked)

    # -- entry work that raises -------------------------------------------------------------------
    def on_phase_error(self, trigger: Trigger, source: State, exc: BaseException, duration: float) -> None:
        if isinstance(exc, StartupAborted):  # stopped from outside, not failed: the audit tells them apart
            self.log_aborted(exc)
        else:
            field = getattr(exc, "field", None)
            self.shared.log.write(
                records.TransitionFailed(
                    trigger=trigger.value,
                    source=source.name,
                    error_type=type(exc).__name__,
                    error=redact_text(str(exc)),
                    duration_s=duration,
                    field=field if isinstance(field, str) else records.UNSET,
                )
            )
        self.shared.active = None
        self.force_fail(f"{trigger.value}: {type(exc).__name__}")
        where = self.record_where(str(exc))
        if not self.shared.runtime.validated:
            way_out = (
                "The lifecycle is FAILED with nothing validated, so restart() cannot help: fix the "
                "config and create a new Lifecycle with it."
            )
        else:
            way_out = f"The lifecycle is now {self.shared.state.name}; call restart() or shutdown()."
        if isinstance(exc, LifecycleError):
            raise type(exc)(f"{exc.message} {way_out}{where}", **exc.context) from exc
        if not isinstance(exc, Exception):
            raise exc
        raise PhaseFailed(
            f"{trigger.value} failed in {source.name}: {type(exc).__name__}: {exc}. {way_out}{where}",
            state=source,
            trigger=trigger,
        ) from exc

    def force_fail(self, reason: str) -> None:
        """Move to FAILED (where the table allows it from here), logging the FAIL transition."""
        if find(self.shared.state, Trigger.FAIL) is None:
            return
        self.reason = reason
        self.shared.log.write(records.TransitionStarted(trigger=Trigger.FAIL.value, source=self.shared.state.name))
        source = self.shared.state
        self.phases_failed(source)
        self._move(Trigger.FAIL, source, 0.0)

    def phases_failed(self, source: State) -> None:
        """Tell the phases (when they listen: `failed(runtime, state, reason)`) that this rank
        failed, so the other ranks stop waiting for it and its shutdown waits on none of them."""
        hook = getattr(self.shared.phases, "failed", None)
        if hook is not None:
            with contextlib.suppress(Exception):  # best effort: the failure itself is what matters
                hook(self.shared.runtime, source.name, redact_text(self.reason))

    def record_where(self, said: str) -> str:
        """Make sure the first failure leaves a record even before the log was opened (a failure in
        validate): open the log now, or send its records to stderr when the directory is the
        problem. Returns what the error message (`said` so far) should add: why the directory could
        not take the log, unless `said` already says it."""
        if self.shared.log_dir.path is None or self.shared.log.is_open or self.shared.log.fault is not None:
            return ""
        opened, problem = self.shared.log_dir.open_after_failure(self.shared.log)
        if opened is not None:
            return ""
        self.shared.log.to_stderr()
        if problem is None:
            fault = self.shared.log.fault
            return f" The startup log went to stderr as JSON lines: {self.shared.log.path} cannot be written ({fault})."
        why = " (above)" if problem in said else f": {redact_text(problem)}"
        return f" The startup log went to stderr as JSON lines, because logging.log_dir cannot take it{why}."

    # -- a log that cannot be written -------------------------------------------------------------
    def new_log_fault(self) -> OSError | None:
        fault = self.shared.log.fault
        if fault is None or self.fault_seen:
            return None
        self.fault_seen = True
        return fault

    def fail_for_log(self, trigger: Trigger | None, source: State, *, raise_: bool = True) -> None:
        """The log stopped taking records: FAILED now (later records go to stderr); raise unless
        this was a user's own call (`record`, a tripwire), which must not fail because of our log:
        then its work goes on, and one line on stderr says so at once."""
        fault = self.shared.log.fault
        name = trigger.value if trigger is not None else "record"
        self.shared.log.write(
            records.TransitionFailed(
                trigger=name,
                source=source.name,
                error_type=type(fault).__name__,
                error=redact_text(str(fault)),
                duration_s=0.0,
            )
        )
        self.force_fail(f"log_write_failed: {fault}")
        if not raise_:  # the caller's work (training) goes on: a person is told now, not at its end
            _console_line(
                f"rank {self.shared.log.rank}: the startup log {self.shared.log.path} cannot be written "
                f"({redact_text(str(fault))}); the lifecycle is FAILED and training goes on unlogged, its "
                "records on stderr as JSON lines. Free the disk or choose another logging.log_dir."
            )
        if raise_:
            path, now = self.shared.log.path, self.shared.state.name
            raise PhaseFailed(
                f"the startup log {path} cannot be written ({fault}) during {name} in {source.name}; "
                f"its records now go to stderr as JSON lines. The lifecycle is {now}: call shutdown() "
                "(it releases everything), then free the disk or choose another logging.log_dir",
                state=source,
                trigger=trigger,
            ) from fault

    # -- SIGTERM / SIGINT during startup ----------------------------------------------------------
    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.trap.watch.taken()
        signals.took(signum)
        if self.running or self.shared.state is State.SHUT_DOWN or os.getpid() != self.trap.pid:
            self.pass_on(signum, _frame)  # a forked child (a data loader's worker) neither logs nor releases
            return
        if self.aborting:
            return
        self.aborting = True
        active = self.shared.active
        aborted = StartupAborted(signum, state=self.shared.state.name, trigger=active.value if active else None)
        if self.shared.depth == 0:  # between transitions: nothing is half done, release right here
            self.abort(aborted)
        raise aborted

    def abort(self, aborted: StartupAborted) -> None:
        """Log `startup_aborted`, release everything in reverse order; the caller re-raises."""
        self.aborting = True  # a second signal during the releases is ignored, not obeyed half-way
        try:
            if self.shared.state is State.SHUT_DOWN:
                return
            self.log_aborted(aborted)
            # a release that failed is logged (transition_failed); the exit code says aborted
            with contextlib.suppress(LifecycleError):
                self._shutdown()
        finally:
            self.trap.uninstall()

    def on_signal_blocked(self, signum: int, waited_s: float) -> None:
        """On the signal watch's thread: `signum` came `waited_s` ago and the main thread has not run
        its handler. It is blocked in native code (a collective, a store wait, `init_process_group`)
        that may never return, its peers blocked too. Log `startup_aborted` with `blocked_s`, say so
        on stderr, and end the process with 128 + N, as the signal would have without a handler: the
        releases cannot run (the main thread holds them), what they release goes with the process."""
        if self.aborting or self.running:  # the main thread took a signal after all, or trains now
            return
        self.aborting = self.abort_logged = True
        active = self.shared.active
        aborted = StartupAborted(signum, state=self.shared.state.name, trigger=active.value if active else None)
        self.shared.log.write(
            records.StartupAborted(
                signal=aborted.signal, state=aborted.state, trigger=aborted.trigger, blocked_s=round(waited_s, 1)
            )
        )
        during = f" during {aborted.trigger}()" if aborted.trigger else ""
        line = (
            f"lifecycle: rank {self.shared.runtime.rank}: startup aborted by {aborted.signal} in state {aborted.state}"
            f"{during}; its main thread was blocked in native code for {waited_s:.0f} s, so the process ends "
            f"without the releases (exit {aborted.code}).\n"
        )
        with contextlib.suppress(OSError):
            os.write(2, line.encode())
        os._exit(int(aborted.code or 1))

    def log_aborted(self, aborted: StartupAborted) -> None:
        if not self.abort_logged:
            self.abort_logged = True
            self.shared.log.write(
                records.StartupAborted(signal=aborted.signal, state=aborted.state, trigger=aborted.trigger)
            )

    # -- SIGTERM / SIGINT after the startup (training) ------------------------------------------
    def settle(self, *, reached: bool) -> None:
        """The startup reached its target: the handlers stay, and a signal now is logged, then handed
        on (`pass_on`). It failed or shut down: they go. An abort keeps them (ignoring repeats) until
        its releases end."""
        if self.aborting:
            return
        self.running = reached
        if not reached:
            self.trap.uninstall()
        else:  # no watch (thread, wakeup fd) while training: a shutdown on another thread could not end it
            self.trap.watch.disarm()

    def log_received(self, signum: int) -> None:
        """`signal_received`, once: the audit tells a rank stopped from outside (a launcher ending the
        survivors of a failure, a scheduler's SIGTERM) from the rank that failed."""
        if self.received_logged or self.shared.state is State.SHUT_DOWN or os.getpid() != self.trap.pid:
            return
        self.received_logged = True
        self.shared.log.write(records.SignalReceived(signal=signal.Signals(signum).name, state=self.shared.state.name))

    def pass_on(self, signum: int, frame: FrameType | None) -> None:
        """A signal after the startup reached its target belongs to the training: log it, then do
        what the handler before ours would have done: call it, ignore the signal, or end the
        process as the default action does (no releases: as without the lifecycle)."""
        self.log_received(signum)
        previous = self.trap.previous.get(signum)
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            self.trap.uninstall()
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    # -- SIGTERM / SIGINT during shutdown --------------------------------------------------------
    @contextlib.contextmanager
    def signals_held(self) -> Iterator[None]:
        """Hold SIGTERM/SIGINT while `shutdown()` releases (main thread): a Ctrl-C there must not
        leave half a release behind. The release finishes; then `StartupAborted` (exit 128 + N)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        held: list[int] = []

        def hold(signum: int, _frame: FrameType | None) -> None:
            self.trap.watch.taken()
            signals.took(signum)
            held.append(signum)

        previous = {sig: signal.signal(sig, hold) for sig in _SIGNALS}
        self.trap.holding = hold
        try:
            yield
        finally:
            self.trap.holding = None
            for sig, handler in previous.items():
                if signal.getsignal(sig) is hold:  # else the release put the user's handler back itself
                    signal.signal(sig, handler)
            if held and not self.aborting:  # an abort in progress already says why it stopped
                raise StartupAborted(held[0], state=self.shared.state.name, trigger=Trigger.SHUTDOWN.value)

    # -- releases from the wrong thread -----------------------------------------------------------
    def refuse_wrong_thread(self, trigger: Trigger) -> None:
        """A release that would close the CPU rehearsal from another thread is refused before
        anything changes (function modes are per-thread)."""
        if trigger not in (Trigger.SHUTDOWN, Trigger.RESTART):
            return
        rehearsal = self.shared.runtime.rehearsal
        thread_id = getattr(rehearsal, "thread_id", None)
        if rehearsal is None or not getattr(rehearsal, "active", False) or thread_id in (None, threading.get_ident()):
            return
        if not getattr(rehearsal, "owner_alive", True):  # its thread ended: any thread may release it
            return
        raise RehearsalError(
            f"{trigger.value}() refused on thread {threading.get_ident()}: the CPU rehearsal was started on "
            f"thread {thread_id} (the one that ran init_distributed) and can only be closed there. Call "
            f"{trigger.value}() from that thread; nothing was released or changed.",
            thread_id=thread_id,
        )
