"""`Lifecycle`: the driver API over the transition table, with guards, tripwires and the startup log.

It owns its parts and calls them: the shared record (`_shared.py`), the side-effect rules, failure
handling, the entry work, the ledger and cycles, and the step book. The driver itself fires
triggers: guards, then the entry work, then the machine's move and the completion record.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Unpack

from lifecycle.config import RunConfig
from lifecycle.core_entry import steps as _steps
from lifecycle.core_entry.steps import StepHandle, StepResult, StepsSlot
from lifecycle.engine import _tripwires, _warnings
from lifecycle.engine._failures import Failures, track
from lifecycle.engine._guarding import Guards
from lifecycle.engine._ledger import CauseFields, CycleFields, Cycles
from lifecycle.engine._machine import build_machine
from lifecycle.engine._shared import TripwirePolicy, make_shared, started_record
from lifecycle.engine._side_effects import SideEffectRules
from lifecycle.engine._work import RESUMING, EntryWork
from lifecycle.errors import GuardRejected, InvalidTransition, PhaseFailed, StartupAborted
from lifecycle.log import records
from lifecycle.log.records import Record
from lifecycle.runtime import GivenProvider, Options, OptionValues, PhaseSet, Runtime
from states import (
    PLAN_TARGETS,
    STARTUP_ORDER,
    Plan,
    State,
    Transition,
    Trigger,
    allowed_triggers,
    find,
    forward_trigger,
)

if TYPE_CHECKING:
    from torch.distributed import Store
__all__ = ["Lifecycle", "TripwirePolicy"]

_FORWARD = frozenset(forward_trigger(dest) for dest in STARTUP_ORDER[1:])


class Lifecycle:
    """Drive one process's Megatron startup through the table: `lc.advance_to(State.CALLBACKS_BOUND)`."""

    def __init__(
        self,
        config: RunConfig,
        provider: GivenProvider = None,
        log_dir: str | Path | None = None,
        *,
        plan: Plan | str | None = None,
        phases: PhaseSet | None = None,
        tripwires: TripwirePolicy = "raise",
        options: Options | OptionValues | None = None,
        run_id: str | None = None,
    ) -> None:
        self._shared = shared = make_shared(
            config, provider, log_dir, plan=plan, phases=phases, tripwires=tripwires, options=options, run_id=run_id
        )
        self._guards = Guards(shared)
        self._rules = SideEffectRules(shared)
        self._cycles = Cycles(shared)
        self._failures = Failures(shared, shutdown=self.shutdown, move=self._move)
        self._work = EntryWork(shared, cycles=self._cycles, failures=self._failures, declare=self._rules.declare)
        self.steps_slot = StepsSlot()
        """The step book of the current binding (`lifecycle.core_entry.steps.steps_for`)."""
        self._machine = build_machine(shared.model)
        shared.log.write(started_record(shared, self.target, tripwires, config.rehearsal))
        if tripwires != "off":
            _tripwires.arm(self._rules)
        self._warnings = _warnings.capture(
            shared, console=shared.runtime.rank == 0, enabled=shared.options.capture_warnings
        )
        track(self)

    # -- what users read -------------------------------------------------------------------------
    @property
    def state(self) -> State:
        return self._shared.state

    @property
    def runtime(self) -> Runtime:
        return self._shared.runtime

    @property
    def plan(self) -> Plan:
        return self._shared.plan

    @property
    def provider(self) -> GivenProvider:
        return self._shared.provider

    @property
    def options(self) -> Options:
        return self._shared.options

    @property
    def policy(self) -> TripwirePolicy:
        return self._shared.policy

    @property
    def target(self) -> State:
        """The state this lifecycle's plan stops at."""
        return PLAN_TARGETS[self._shared.plan]

    @property
    def log_path(self) -> Path | None:
        return self._shared.log.path

    @property
    def run_id(self) -> str:
        return self._shared.log.run_id

    @property
    def records(self) -> list[dict[str, object]]:
        """Every record logged so far, when created with `options=Options(keep_records=True)`."""
        return self._shared.log.records

    def check_config(self) -> None:
        """Raise `ConfigMutated` (and log it) if the validated config, or the megatron config built
        from it, changed; the engine also checks before every transition."""
        with self._shared.lock:
            self._work.check_mutation(None)

    @property
    def log_fault(self) -> OSError | None:
        """Why the log file stopped taking records (they went to stderr since), or None."""
        return self._shared.log.fault

    def record(self, record: Record) -> None:
        """Add a record to this rank's startup log: a type of `lifecycle.log.records`, its fields set
        (training code logs `lc.record(StepCompleted(step=..., loss=..., duration_s=...))`).
        Never raises because of the log: a write failure moves the lifecycle to FAILED instead."""
        with self._shared.lock:
            self._shared.log.write(record)
            if self._failures.new_log_fault() is not None:
                self._failures.fail_for_log(None, self.state, raise_=False)

    # -- triggers ---------------------------------------------------------------------------------
    def validate(self) -> Runtime:
        return self._fire(Trigger.VALIDATE)

    def start_services(self) -> Runtime:
        return self._fire(Trigger.START_SERVICES)

    def init_distributed(self) -> Runtime:
        return self._fire(Trigger.INIT_DISTRIBUTED)

    def build_model(self) -> Runtime:
        return self._fire(Trigger.BUILD_MODEL)

    def bind_callbacks(self) -> Runtime:
        return self._fire(Trigger.BIND_CALLBACKS)

    def rebuild(self) -> Runtime:
        """MODEL_BUILT/CALLBACKS_BOUND → DISTRIBUTED: unbind, drop model and optimizer, keep the rest."""
        return self._fire(Trigger.REBUILD)

    def restart(self) -> Runtime:
        """Back to VALIDATED in a new generation, releasing services, process groups and the model."""
        return self._fire(Trigger.RESTART)

    def fail(self, reason: str = "") -> Runtime:
        """Mark the startup as failed (the engine does this itself when entry work raises)."""
        self._failures.reason = reason
        return self._fire(Trigger.FAIL)

    def shutdown(self) -> Runtime:
        """Release everything in reverse order; a no-op once SHUT_DOWN. From another thread than the
        one that started the CPU rehearsal it is refused (RehearsalError) before anything changes,
        unless that thread has ended; at interpreter exit it runs by itself if nobody called it."""
        with self._shared.lock:
            if self.state is State.SHUT_DOWN:
                return self._shared.runtime
            self._warnings.flush()
            with self._failures.signals_held():
                try:
                    return self._fire(Trigger.SHUTDOWN)
                finally:
                    self._after_shutdown()

    def _after_shutdown(self) -> None:
        """Whatever happened on the way (a release that raised, a log that failed), a lifecycle in
        SHUT_DOWN leaves no tripwire, signal handler or open file behind."""
        if self.state is State.SHUT_DOWN:
            self._warnings.release()  # first: nothing is written after the shutdown record
            _tripwires.disarm(self._rules)
            self._failures.trap.uninstall()
            self._shared.log.close()

    def fire(self, trigger: Trigger | str) -> Runtime:
        """Fire a trigger by enum or name (what the fuzzer and CLI use)."""
        try:
            trig = Trigger(trigger)
        except ValueError:
            raise InvalidTransition(
                f"{trigger!r} is not a trigger; triggers are {', '.join(t.value for t in Trigger)}",
                state=self.state,
                trigger=trigger,
                allowed=allowed_triggers(self.state),
            ) from None
        return self.shutdown() if trig is Trigger.SHUTDOWN else self._fire(trig)

    def advance_to(self, target: State) -> Runtime:
        """Fire the forward triggers from the current state up to `target`, in order, holding the
        lock throughout: concurrent callers each get the runtime (or one clear error)."""
        with self._shared.lock:
            return self._advance(target)

    def _advance(self, target: State) -> Runtime:
        if target not in STARTUP_ORDER or self.state not in STARTUP_ORDER:
            raise InvalidTransition(
                f"advance_to({target.name}) needs a startup state on both ends; the lifecycle is "
                f"{self.state.name}. From FAILED call restart() first.",
                state=self.state,
                trigger="advance_to",
                allowed=allowed_triggers(self.state),
            )
        if target.startup_index < self.state.startup_index:
            raise InvalidTransition(
                f"advance_to({target.name}) goes backwards from {self.state.name}; use rebuild() or restart()",
                state=self.state,
                trigger="advance_to",
                allowed=allowed_triggers(self.state),
            )
        for dest in STARTUP_ORDER[self.state.startup_index + 1 : target.startup_index + 1]:
            self._fire(forward_trigger(dest))
        return self._shared.runtime

    def __enter__(self) -> Lifecycle:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, StartupAborted):
            self._failures.abort(exc)
        if exc is not None and self.state not in (State.FAILED, State.SHUT_DOWN):
            self._failures.reason = f"{type(exc).__name__}: {exc}"
            self._fire(Trigger.FAIL)
        self.shutdown()

    # -- the ledger and restart cycles (lifecycle.resilience) -------------------------------------
    def provide(self, *, rendezvous_store: Store | None) -> None:
        """Hand DISTRIBUTED a store to rendezvous on instead of MASTER_ADDR (`Runtime.rendezvous_store`)."""
        shared = self._shared
        shared.runtime = dataclasses.replace(
            shared.runtime, rendezvous_store=rendezvous_store, rendezvous_generation=shared.runtime.generation
        )

    @property
    def cycle(self) -> int:
        return self._shared.log.cycle

    @property
    def ledger(self) -> list[tuple[str, str]]:
        """(state, resource) of every entry in the ledger now, oldest first."""
        return self._cycles.ledger.names()

    def begin_cycle(self, cycle: int) -> None:
        """Start restart cycle `cycle`: every later record carries it in its `cycle` field."""
        self._cycles.begin(cycle)

    def cycle_trained(self, **fields: Unpack[CycleFields]) -> None:
        """Log `cycle_started` as training starts: the ledger now, the config fingerprint, the caller's fields."""
        self._cycles.trained(**fields)

    def end_cycle(self, **fields: Unpack[CauseFields]) -> None:
        """Log `cycle_ended` (`cause_rank`, `cause`, `fault_ts`, ...) in the cycle that ends."""
        self._cycles.ended(**fields)

    # -- training steps (lifecycle.core_entry.steps: one implementation, shared with train_steps) ---
    @contextmanager
    def step(self, n: int) -> Iterator[StepHandle]:
        """Around one hand-written training step (forward/backward and optimizer step inside).

        Step 1 defers the parameter gather (distributed optimizer with overlapped gather), the
        first step is checked by the binding's watchdog, and `step_completed` is logged with
        `s.loss`. Raises `FinalizerNotCalled` when the first step ran through an unbound config.
        """
        with _steps.steps_for(self).step(n) as handle:
            yield handle

    def after_step(self, n: int, *, loss: float | None = None) -> StepResult:
        """For loops that cannot use `with lc.step(n)`: the watchdog and `step_completed` after step
        `n` (the first-step gather deferral needs `lc.step`, which also calls this)."""
        return _steps.steps_for(self).end(n, loss)

    def sync_params(self, reason: str = "after_last_step") -> bool:
        """Force the parameter all-gather after the last step and before saving a checkpoint, as
        Megatron-LM does; False (nothing to do) unless the distributed optimizer overlaps it."""
        return _steps.steps_for(self).sync_params(reason)

    # -- the engine -------------------------------------------------------------------------------
    def _fire(self, trigger: Trigger) -> Runtime:
        shared = self._shared
        with shared.lock:
            shared.depth += 1
            try:
                return self._fire_locked(trigger)
            except StartupAborted as aborted:
                if shared.depth == 1:
                    self._failures.abort(aborted)
                raise
            finally:
                shared.depth -= 1

    def _fire_locked(self, trigger: Trigger) -> Runtime:
        shared, failures = self._shared, self._failures
        source = self.state
        row = find(source, trigger)
        if row is None:
            self._guards.undefined(trigger, source)
        failures.refuse_wrong_thread(trigger)
        if trigger not in (Trigger.FAIL, Trigger.SHUTDOWN):
            if failures.new_log_fault() is not None:
                failures.fail_for_log(trigger, source)
            self._work.check_mutation(trigger)
        if trigger in _FORWARD or trigger is Trigger.RESTART:
            failures.trap.install()
        _tripwires.refresh()
        shared.log.write(records.TransitionStarted(trigger=trigger.value, source=source.name))
        if trigger in _FORWARD and failures.new_log_fault() is not None:
            failures.fail_for_log(trigger, source)  # do not start work the log cannot record
        started = time.perf_counter()
        assert row is not None
        self._run(trigger, row, source, started)
        self._completed(trigger, source, time.perf_counter() - started)
        if trigger is not Trigger.SHUTDOWN and failures.new_log_fault() is not None:
            failures.fail_for_log(trigger, source)
        if self._work.pending_error is not None:
            error, self._work.pending_error = self._work.pending_error, None
            raise PhaseFailed(
                f"shutdown released what it could, but: {error}", state=self.state, trigger=trigger
            ) from error
        return shared.runtime

    def _run(self, trigger: Trigger, row: Transition, source: State, started: float) -> None:
        shared = self._shared
        shared.active = trigger
        try:
            # Guards first, once (they raise), then the entry work, then the machine takes the new
            # state. Entry work runs outside the machine's callbacks, and the machine has no
            # conditions: `shared.lock` is held for the whole transition (`_fire`).
            self._guards.check(row)
            self._failures.running = False  # a signal is the startup's again, until the target
            if trigger in RESUMING and shared.policy != "off":
                _tripwires.arm(self._rules)  # only once the guards let it through: a refusal changes nothing
            self._enter(trigger)
            self._trigger(trigger)
        except GuardRejected:
            raise
        except BaseException as exc:
            self._failures.on_phase_error(trigger, source, exc, time.perf_counter() - started)
        finally:
            shared.active = None

    def _enter(self, trigger: Trigger) -> None:
        """The entry work, then the runtime it left, which only the driver assigns; a restart whose
        release failed began its generation all the same."""
        shared = self._shared
        try:
            runtime = self._work.enter(trigger, rank_known=self._rank_known)
        except Exception:
            if trigger is Trigger.RESTART:
                shared.runtime = self._work.next_generation(shared.runtime)
            raise
        shared.runtime = runtime
        self._work.entered(trigger)

    def _rank_known(self, rank: int, world_size: int) -> None:
        """A phase learned this rank's place (DISTRIBUTED): later records carry it."""
        shared = self._shared
        shared.runtime = dataclasses.replace(shared.runtime, rank=rank, world_size=world_size)
        if rank != shared.log.rank or world_size != shared.log.world_size:
            shared.log.rebind(rank=rank, world_size=world_size)

    def _trigger(self, trigger: Trigger) -> None:
        self._machine.events[trigger.value].trigger(self._shared.model)

    def _move(self, trigger: Trigger, source: State, duration: float) -> None:
        """Fire `trigger` on the machine and log its completion (failure handling's FAIL)."""
        self._trigger(trigger)
        self._completed(trigger, source, duration)

    def _completed(self, trigger: Trigger, source: State, duration: float) -> None:
        shared = self._shared
        shared.log.write(
            records.TransitionCompleted(
                trigger=trigger.value,
                source=source.name,
                dest=self.state.name,
                duration_s=duration,
                config_fingerprint=shared.runtime.fingerprint,
                reason=self._failures.reason if trigger is Trigger.FAIL else records.UNSET,
            )
        )
        if self.state in (self.target, State.FAILED, State.SHUT_DOWN):
            # Tripwires guard the startup only: user code recovering from a failure may seed and
            # create groups; restart() arms them again.
            _tripwires.disarm(self._rules)
            self._failures.settle(reached=self.state is self.target)
