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
from lifecycle.engine import _steps, _tripwires
from lifecycle.engine._context import Context
from lifecycle.engine._machine import MachineModel, build_machine
from lifecycle.engine._side_effects import SideEffectRules
from lifecycle.errors import (
    ConfigError,
    ConfigMutated,
    GuardRejected,
    InvalidTransition,
    LifecycleError,
    PhaseFailed,
)
from lifecycle.log import AuditLog, check_log_dir, events, redact
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
_RELEASE_KEEP = {
    Trigger.REBUILD: State.DISTRIBUTED,
    Trigger.RESTART: State.VALIDATED,
    Trigger.SHUTDOWN: State.CONFIGURED,
}


class Lifecycle(SideEffectRules, _steps.StepLoop):
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
                field="tripwires", problems=[repr(tripwires)],
            )
        self.plan = Plan(plan if plan is not None else config.plan)
        self.provider = provider
        self.options = Options.of(options)
        self.policy: TripwirePolicy = tripwires
        self._config = config
        self._phases: PhaseSet = phases if phases is not None else _default_phases()
        log_dir = log_dir if log_dir is not None else config.logging.log_dir
        self._log_dir = Path(log_dir) if log_dir is not None else None
        self._runtime = Runtime(config=config, rank=rank_of(config), world_size=world_size_of(config))
        self._snapshot: Snapshot | None = None
        self._active: Trigger | None = None
        self._facts_now: Facts | None = None
        self._lock = threading.RLock()
        self._pending_error: BaseException | None = None
        self._phase_logged_validation = False
        self._log = AuditLog(
            run_id=run_id or run_id_from_env(), rank=self._runtime.rank, world_size=self._runtime.world_size,
            keep_records=self.options.keep_records,
        )
        self._model = MachineModel()
        self._machine = build_machine(self._model, on_guard=self._guard)
        self._log.emit(
            events.LIFECYCLE_STARTED, plan=self.plan.value, target=self.target.name, policy=tripwires,
            pid=os.getpid(), host=socket.gethostname(), rehearsal=config.rehearsal,
        )
        if tripwires != "off":
            _tripwires.arm(self)

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

    def record(self, event: str, **fields: Any) -> None:
        """Add a record to this rank's startup log (training code logs `step_completed` this way)."""
        self._log.emit(event, **fields)

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
        """Release everything in reverse order; a no-op once SHUT_DOWN."""
        if self.state is State.SHUT_DOWN:
            return self._runtime
        return self._fire(Trigger.SHUTDOWN)

    def fire(self, trigger: Trigger | str) -> Runtime:
        """Fire a trigger by enum or name (what the fuzzer and CLI use)."""
        try:
            trig = Trigger(trigger)
        except ValueError:
            raise InvalidTransition(
                f"{trigger!r} is not a trigger; triggers are {', '.join(t.value for t in Trigger)}",
                state=self.state, trigger=trigger, allowed=allowed_triggers(self.state),
            ) from None
        return self.shutdown() if trig is Trigger.SHUTDOWN else self._fire(trig)

    def advance_to(self, target: State) -> Runtime:
        """Fire the forward triggers from the current state up to `target`, in order."""
        if target not in STARTUP_ORDER or self.state not in STARTUP_ORDER:
            raise InvalidTransition(
                f"advance_to({target.name}) needs a startup state on both ends; the lifecycle is "
                f"{self.state.name}. From FAILED call restart() first.",
                state=self.state, trigger="advance_to", allowed=allowed_triggers(self.state),
            )
        if target.startup_index < self.state.startup_index:
            raise InvalidTransition(
                f"advance_to({target.name}) goes backwards from {self.state.name}; use rebuild() or restart()",
                state=self.state, trigger="advance_to", allowed=allowed_triggers(self.state),
            )
        for dest in STARTUP_ORDER[self.state.startup_index + 1 : target.startup_index + 1]:
            self._fire(forward_trigger(dest))
        return self._runtime

    def __enter__(self) -> Lifecycle:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None and self.state not in (State.FAILED, State.SHUT_DOWN):
            self._fail_reason = f"{type(exc).__name__}: {exc}"
            self._fire(Trigger.FAIL)
        self.shutdown()

    # -- the engine -------------------------------------------------------------------------------
    def _fire(self, trigger: Trigger) -> Runtime:
        with self._lock:
            source = self.state
            row = find(source, trigger)
            if row is None:
                allowed = allowed_triggers(source)
                self._log.emit(events.INVALID_TRANSITION, trigger=trigger.value, source=source.name,
                               allowed=[t.value for t in allowed])
                raise InvalidTransition(
                    f"{trigger.value} is not defined from {source.name}; allowed from there: "
                    f"{', '.join(t.value for t in allowed) or 'nothing (terminal)'}",
                    state=source, trigger=trigger, allowed=allowed,
                )
            if trigger not in (Trigger.FAIL, Trigger.SHUTDOWN):
                self._check_mutation(trigger)
            if trigger in (Trigger.REBUILD, Trigger.RESTART) and self.policy != "off":
                _tripwires.arm(self)
            _tripwires.refresh()
            self._log.emit(events.TRANSITION_STARTED, trigger=trigger.value, source=source.name)
            started = time.perf_counter()
            self._active = trigger
            self._facts_now = self._facts(trigger, row.dest)
            try:
                # Guards first (they raise), then the entry work, then the machine commits the state
                # (re-checking the same guards as its conditions). Entry work runs outside the
                # machine's callbacks: each callback costs a trip through LockedMachine's proxies.
                self._guard(row)(None)
                self._enter(trigger)
                self._trigger(trigger)
            except GuardRejected:
                raise
            except BaseException as exc:
                self._on_phase_error(trigger, source, exc, time.perf_counter() - started)
            finally:
                self._active = None
                self._facts_now = None
            self._completed(trigger, source, time.perf_counter() - started)
            if self._pending_error is not None:
                error, self._pending_error = self._pending_error, None
                raise PhaseFailed(f"shutdown released what it could, but: {error}", state=self.state,
                                  trigger=trigger) from error
            return self._runtime

    def _trigger(self, trigger: Trigger) -> None:
        self._machine.events[trigger.value].trigger(self._model)

    def _completed(self, trigger: Trigger, source: State, duration: float) -> None:
        fields: dict[str, Any] = {}
        if trigger is Trigger.FAIL:
            fields["reason"] = getattr(self, "_fail_reason", "")
        self._log.emit(
            events.TRANSITION_COMPLETED, trigger=trigger.value, source=source.name, dest=self.state.name,
            duration_s=duration, config_fingerprint=self._runtime.fingerprint, **fields,
        )
        if self.state is self.target or self.state is State.SHUT_DOWN:
            _tripwires.disarm(self)
        if self.state is State.SHUT_DOWN:
            self._log.close()

    def _on_phase_error(self, trigger: Trigger, source: State, exc: BaseException, duration: float) -> None:
        self._log.emit(events.TRANSITION_FAILED, trigger=trigger.value, source=source.name,
                       error_type=type(exc).__name__, error=str(exc), duration_s=duration)
        self._active = None
        self._force_fail(f"{trigger.value}: {type(exc).__name__}")
        if isinstance(exc, LifecycleError) or not isinstance(exc, Exception):
            raise exc
        raise PhaseFailed(
            f"{trigger.value} failed in {source.name}: {type(exc).__name__}: {exc}. The lifecycle is now "
            f"{self.state.name}; call restart() or shutdown().",
            state=source, trigger=trigger,
        ) from exc

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
        self._log.emit(events.GUARD_REJECTED, trigger=row.trigger.value, source=facts.state.name,
                       guard=guard.__name__, reason=reason)
        raise GuardRejected(
            f"{row.trigger.value} refused in {facts.state.name} by {guard.__name__}: {reason}",
            state=facts.state, trigger=row.trigger, guard=guard.__name__, reason=reason,
        )

    def _facts(self, trigger: Trigger, dest: State) -> Facts:
        rt = self._runtime
        return Facts(
            state=self.state, trigger=trigger, dest=dest, plan=self.plan, config_validated=rt.validated,
            services_ready=rt.services_ready, distributed=rt.distributed,
            model_built=rt.model is not None, generation=rt.generation,
        )

    def _enter(self, trigger: Trigger) -> None:
        ctx = Context(runtime=self._runtime, trigger=trigger, provider=self.provider, plan=self.plan,
                      options=self.options, declare=self._declare_side_effect, record=self._emit_from_phase,
                      rank_known=self._set_rank)
        if trigger is Trigger.VALIDATE:
            self._runtime = self._validated(self._phases.validate(ctx))
        elif trigger in _RELEASE_KEEP:
            self._runtime = self._release(ctx, trigger)
        elif trigger is not Trigger.FAIL:
            self._runtime = getattr(self._phases, trigger.value)(ctx)

    def _validated(self, runtime: Runtime) -> Runtime:
        fingerprint = self._config.fingerprint()
        if runtime.fingerprint is None:
            runtime = dataclasses.replace(runtime, fingerprint=fingerprint)
        if self._log_dir is not None:
            problem = check_log_dir(self._log_dir)
            if problem:
                raise ConfigError(f"logging.log_dir: {problem}", field="logging.log_dir", problems=[problem])
        self._snapshot = Snapshot(self._config)
        if not self._phase_logged_validation:
            self._log.emit(events.CONFIG_VALIDATED, fingerprint=runtime.fingerprint,
                           config=redact(self._config.to_dict()), environment=self.plan is not Plan.CONVERT)
        if self._log_dir is not None:
            self._log.open(self._log_dir)
        return runtime

    def _release(self, ctx: Context, trigger: Trigger) -> Runtime:
        try:
            runtime = self._phases.release(ctx, _RELEASE_KEEP[trigger])
        except Exception as exc:
            if trigger is not Trigger.SHUTDOWN:
                raise
            self._log.emit(events.TRANSITION_FAILED, trigger=trigger.value, source=self.state.name,
                           error_type=type(exc).__name__, error=str(exc), duration_s=0.0)
            self._pending_error = exc
            runtime = dataclasses.replace(self._runtime, model=None, optimizer=None, binding=None)
        if trigger is Trigger.RESTART:
            runtime = dataclasses.replace(runtime, generation=self._runtime.generation + 1)
            self._log.rebind(generation=runtime.generation)
            self._log.emit(events.GENERATION_STARTED, reason="restart")
        if trigger is Trigger.SHUTDOWN:
            self._log.emit(events.LIFECYCLE_SHUTDOWN, source=self.state.name)
        return runtime

    def _check_mutation(self, trigger: Trigger | None) -> None:
        if self._snapshot is None or not self._runtime.validated:
            return
        changes = self._snapshot.changes()
        if not changes:
            changes = list(self._phases.drift(self._runtime))
        if not changes:
            return
        for name, old, new in changes:
            self._log.emit(events.CONFIG_MUTATED, field=name, validated=old, current=new)
        name, old, new = changes[0]
        self._force_fail(f"config_mutated: {name}")
        raise ConfigMutated(
            f"{name} changed after VALIDATED ({old!r} -> {new!r}){f' before {trigger.value}' if trigger else ''}: "
            "configs are frozen "
            "once validated; build a new RunConfig (dataclasses.replace) and a new Lifecycle instead",
            field=name, validated=old, current=new,
        )

    def _force_fail(self, reason: str) -> None:
        """Move to FAILED (where the table allows it from here), logging the FAIL transition."""
        if find(self.state, Trigger.FAIL) is None:
            return
        self._fail_reason = reason
        self._log.emit(events.TRANSITION_STARTED, trigger=Trigger.FAIL.value, source=self.state.name)
        source = self.state
        self._trigger(Trigger.FAIL)
        self._completed(Trigger.FAIL, source, 0.0)

    def _emit_from_phase(self, event: str, fields: dict[str, Any]) -> None:
        if event == events.CONFIG_VALIDATED:
            self._phase_logged_validation = True
        self._log.emit(event, **fields)

    def _set_rank(self, rank: int, world_size: int) -> None:
        self._runtime = dataclasses.replace(self._runtime, rank=rank, world_size=world_size)
        if rank != self._log.rank or world_size != self._log.world_size:
            self._log.rebind(rank=rank, world_size=world_size)


def _default_phases() -> PhaseSet:
    from lifecycle.megatron import MegatronPhases

    return MegatronPhases()
