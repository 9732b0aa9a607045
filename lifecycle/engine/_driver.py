"""`Lifecycle`: the driver API over the transition table, with guards, tripwires and the startup log."""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from lifecycle.config import RunConfig, Snapshot
from lifecycle.engine import _steps, _tripwires, _warnings
from lifecycle.engine._context import Context
from lifecycle.engine._failures import Failures, SignalTrap, track
from lifecycle.engine._ledger import Cycles
from lifecycle.engine._machine import MachineModel, build_machine
from lifecycle.engine._side_effects import SideEffectRules
from lifecycle.engine._work import ENTERS, RELEASE_KEEP, RESUMING, EntryWork, default_phases
from lifecycle.errors import ConfigError, GuardRejected, InvalidTransition, PhaseFailed, StartupAborted
from lifecycle.launchers import restart_count
from lifecycle.log import AuditLog, events
from lifecycle.runtime import Options, PhaseSet, Runtime, rank_of, run_id_from_env, world_size_of
from states import (
    PLAN_TARGETS,
    STARTUP_ORDER,
    Facts,
    Guard,
    Plan,
    State,
    Transition,
    Trigger,
    allowed_triggers,
    find,
    forward_trigger,
    rule,
)

TripwirePolicy = Literal["raise", "warn", "off"]
_FORWARD = frozenset(forward_trigger(dest) for dest in STARTUP_ORDER[1:])


class Lifecycle(Cycles, SideEffectRules, Failures, EntryWork, _steps.StepLoop):
    """Drive one process's Megatron startup through the table: `lc.advance_to(State.CALLBACKS_BOUND)`."""

    def __init__(
        self,
        config: RunConfig,
        provider: Any = None,
        log_dir: str | Path | None = None,
        *,
        plan: Plan | str | None = None,
        phases: PhaseSet | None = None,
        tripwires: TripwirePolicy = "raise",
        options: Options | Mapping[str, object] | None = None,
        run_id: str | None = None,
    ) -> None:
        if tripwires not in ("raise", "warn", "off"):
            raise ConfigError(
                f"tripwires={tripwires!r} is not a policy; use 'raise' (default), 'warn' or 'off'",
                field="tripwires",
                problems=[repr(tripwires)],
            )
        self.plan = Plan(plan if plan is not None else config.plan)
        self.provider = provider
        self.options = Options.of(options)
        self.policy: TripwirePolicy = tripwires
        self._config = config
        self._phases: PhaseSet = phases if phases is not None else default_phases()
        log_dir = log_dir if log_dir is not None else config.logging.log_dir
        self._log_dir = Path(log_dir) if log_dir is not None else None
        self._runtime = Runtime(config=config, rank=rank_of(config), world_size=world_size_of(config))
        self._snapshot: Snapshot | None = None
        self._active: Trigger | None = None
        self._facts_now: Facts | None = None
        self._lock = threading.RLock()
        self._pending_error: BaseException | None = None
        self._phase_logged_validation = False
        self._fail_reason = ""
        self._depth = 0  # _fire calls in progress on the lock-holding thread
        self._aborting = self._abort_logged = self._fault_seen = False
        self._trap = SignalTrap(self._on_signal, self._on_signal_blocked)
        self._log = AuditLog(
            run_id=run_id or run_id_from_env(),
            rank=self._runtime.rank,
            world_size=self._runtime.world_size,
            keep_records=self.options.keep_records,
        )
        self._model = MachineModel()
        self._machine = build_machine(self._model, on_guard=self._guard)
        self._log.emit(
            events.LIFECYCLE_STARTED,
            plan=self.plan.value,
            target=self.target.name,
            policy=tripwires,
            pid=os.getpid(),
            host=socket.gethostname(),
            rehearsal=config.rehearsal,
            **_elastic(),
        )
        if tripwires != "off":
            _tripwires.arm(self)
        self._warnings = _warnings.capture(self, console=self._runtime.rank == 0, enabled=self.options.capture_warnings)
        track(self)

    # -- what users read -------------------------------------------------------------------------
    @property
    def state(self) -> State:
        return self._model.state

    @property
    def runtime(self) -> Runtime:
        return self._runtime

    @property
    def target(self) -> State:
        """The state this lifecycle's plan stops at."""
        return PLAN_TARGETS[self.plan]

    @property
    def log_path(self) -> Path | None:
        return self._log.path

    @property
    def run_id(self) -> str:
        return self._log.run_id

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every record logged so far, when created with `options=Options(keep_records=True)`."""
        return self._log.records

    def check_config(self) -> None:
        """Raise `ConfigMutated` (and log it) if the validated config, or the megatron config built
        from it, changed; the engine also checks before every transition."""
        with self._lock:
            self._check_mutation(None)

    @property
    def log_fault(self) -> OSError | None:
        """Why the log file stopped taking records (they went to stderr since), or None."""
        return self._log.fault

    def record(self, event: str, **fields: Any) -> None:
        """Add a record to this rank's startup log (training code logs `step_completed` this way).
        Never raises because of the log: a write failure moves the lifecycle to FAILED instead."""
        with self._lock:
            self._log.emit(event, **fields)
            if self._new_log_fault() is not None:
                self._fail_for_log(None, self.state, raise_=False)

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
        self._fail_reason = reason
        return self._fire(Trigger.FAIL)

    def shutdown(self) -> Runtime:
        """Release everything in reverse order; a no-op once SHUT_DOWN. From another thread than the
        one that started the CPU rehearsal it is refused (RehearsalError) before anything changes,
        unless that thread has ended; at interpreter exit it runs by itself if nobody called it."""
        with self._lock:
            if self.state is State.SHUT_DOWN:
                return self._runtime
            self._warnings.flush()
            with self._signals_held():
                try:
                    return self._fire(Trigger.SHUTDOWN)
                finally:
                    self._after_shutdown()

    def _after_shutdown(self) -> None:
        """Whatever happened on the way (a release that raised, a log that failed), a lifecycle in
        SHUT_DOWN leaves no tripwire, signal handler or open file behind."""
        if self.state is State.SHUT_DOWN:
            self._warnings.release()  # first: nothing is written after the shutdown record
            _tripwires.disarm(self)
            self._trap.uninstall()
            self._log.close()

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
        with self._lock:
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
        return self._runtime

    def __enter__(self) -> Lifecycle:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, StartupAborted):
            self._abort(exc)
        if exc is not None and self.state not in (State.FAILED, State.SHUT_DOWN):
            self._fail_reason = f"{type(exc).__name__}: {exc}"
            self._fire(Trigger.FAIL)
        self.shutdown()

    # -- the engine -------------------------------------------------------------------------------
    def _fire(self, trigger: Trigger) -> Runtime:
        with self._lock:
            self._depth += 1
            try:
                return self._fire_locked(trigger)
            except StartupAborted as aborted:
                if self._depth == 1:
                    self._abort(aborted)
                raise
            finally:
                self._depth -= 1

    def _fire_locked(self, trigger: Trigger) -> Runtime:
        source = self.state
        row = find(source, trigger)
        if row is None:
            allowed = allowed_triggers(source)
            self._log.emit(
                events.INVALID_TRANSITION, trigger=trigger.value, source=source.name, allowed=[t.value for t in allowed]
            )
            raise InvalidTransition(
                f"{trigger.value} is not defined from {source.name}; allowed from there: "
                f"{', '.join(t.value for t in allowed) or 'nothing (terminal)'}",
                state=source,
                trigger=trigger,
                allowed=allowed,
            )
        self._refuse_wrong_thread(trigger)
        if trigger not in (Trigger.FAIL, Trigger.SHUTDOWN):
            if self._new_log_fault() is not None:
                self._fail_for_log(trigger, source)
            self._check_mutation(trigger)
        if trigger in _FORWARD or trigger is Trigger.RESTART:
            self._trap.install()
        _tripwires.refresh()
        self._log.emit(events.TRANSITION_STARTED, trigger=trigger.value, source=source.name)
        if trigger in _FORWARD and self._new_log_fault() is not None:
            self._fail_for_log(trigger, source)  # do not start work the log cannot record
        started = time.perf_counter()
        self._run(trigger, row, source, started)
        self._completed(trigger, source, time.perf_counter() - started)
        if trigger is not Trigger.SHUTDOWN and self._new_log_fault() is not None:
            self._fail_for_log(trigger, source)
        if self._pending_error is not None:
            error, self._pending_error = self._pending_error, None
            raise PhaseFailed(
                f"shutdown released what it could, but: {error}", state=self.state, trigger=trigger
            ) from error
        return self._runtime

    def _run(self, trigger: Trigger, row: Transition, source: State, started: float) -> None:
        self._active = trigger
        self._facts_now = self._facts(trigger, row.dest)
        try:
            # Guards first (they raise), then the entry work, then the machine commits the state
            # (re-checking the same guards as its conditions). Entry work runs outside the
            # machine's callbacks: each callback costs a trip through LockedMachine's proxies.
            self._guard(row)(None)
            if trigger in RESUMING and self.policy != "off":
                _tripwires.arm(self)  # only once the guards let it through: a refusal changes nothing
            self._enter(trigger)
            self._trigger(trigger)
        except GuardRejected:
            raise
        except BaseException as exc:
            self._on_phase_error(trigger, source, exc, time.perf_counter() - started)
        finally:
            self._active = None
            self._facts_now = None

    def _trigger(self, trigger: Trigger) -> None:
        self._machine.events[trigger.value].trigger(self._model)

    def _completed(self, trigger: Trigger, source: State, duration: float) -> None:
        fields: dict[str, Any] = {}
        if trigger is Trigger.FAIL:
            fields["reason"] = getattr(self, "_fail_reason", "")
        self._log.emit(
            events.TRANSITION_COMPLETED,
            trigger=trigger.value,
            source=source.name,
            dest=self.state.name,
            duration_s=duration,
            config_fingerprint=self._runtime.fingerprint,
            **fields,
        )
        if self.state in (self.target, State.FAILED, State.SHUT_DOWN):
            # Tripwires guard the startup only: user code recovering from a failure may seed and
            # create groups; restart() arms them again.
            _tripwires.disarm(self)
            if not self._aborting:  # an abort keeps its handlers (ignoring repeats) until released
                self._trap.uninstall()

    def _guard(self, row: Transition) -> Any:
        def condition(_event: Any) -> bool:
            facts = self._facts_now or self._facts(row.trigger, row.dest)
            for guard in row.guards:
                if not guard(facts):
                    self._reject(row, guard, facts)
            return True

        return condition

    def _reject(self, row: Transition, guard: Guard, facts: Facts) -> None:
        reason = rule(guard)
        self._log.emit(
            events.GUARD_REJECTED,
            trigger=row.trigger.value,
            source=facts.state.name,
            guard=guard.__name__,
            reason=reason,
        )
        if facts.state is State.FAILED and not facts.config_validated:
            reason += "; nothing was validated (validate failed): fix the config and create a new Lifecycle with it"
        raise GuardRejected(
            f"{row.trigger.value} refused in {facts.state.name} by {guard.__name__}: {reason}",
            state=facts.state,
            trigger=row.trigger,
            guard=guard.__name__,
            reason=reason,
        )

    def _facts(self, trigger: Trigger, dest: State) -> Facts:
        rt = self._runtime
        return Facts(
            state=self.state,
            trigger=trigger,
            dest=dest,
            plan=self.plan,
            config_validated=rt.validated,
            services_ready=rt.services_ready,
            distributed=rt.distributed,
            model_built=rt.model is not None,
            generation=rt.generation,
        )

    def _enter(self, trigger: Trigger) -> None:
        ctx = Context(
            runtime=self._runtime,
            trigger=trigger,
            provider=self.provider,
            plan=self.plan,
            options=self.options,
            declare=self._declare_side_effect,
            record=self._emit_from_phase,
            rank_known=self._set_rank,
        )
        dest = ENTERS.get(trigger)
        if dest is not None:
            runtime = self._phase(dest).enter(ctx)
            if trigger is Trigger.VALIDATE:
                self._runtime = self._validated(runtime)
            else:
                self._runtime = runtime
                self._register(trigger, dest)
        elif trigger in RELEASE_KEEP:
            self._runtime = self._release(ctx, trigger)
            del ctx  # it holds the released runtime: the ledger checks that nothing does
            self._released(trigger)
        elif trigger is Trigger.FAIL:
            self._phases_failed(self.state)

    def _state_name(self) -> str:
        return self.state.name

    def _emit_from_phase(self, event: str, fields: dict[str, Any]) -> None:
        if event == events.CONFIG_VALIDATED:
            self._phase_logged_validation = True
        self._log.emit(event, **fields)

    def _set_rank(self, rank: int, world_size: int) -> None:
        self._runtime = dataclasses.replace(self._runtime, rank=rank, world_size=world_size)
        if rank != self._log.rank or world_size != self._log.world_size:
            self._log.rebind(rank=rank, world_size=world_size)


def _elastic() -> dict[str, int]:
    """torchrun's restart count, when this process is a restart of an elastic job."""
    count = restart_count()
    return {} if count is None else {"restart_count": count}
