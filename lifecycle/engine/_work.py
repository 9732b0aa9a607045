"""The engine's own part of some transitions' entry work: finding a state's phase, what VALIDATE adds
(log directory and its policy, the snapshot, opening the log), the releases (each phase after the
state the trigger keeps, newest first), and the mutation check before every transition. Mixed
into `Lifecycle`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from lifecycle.config import RunConfig, Snapshot
from lifecycle.errors import ConfigError, ConfigMutated
from lifecycle.log import check_log_dir, events, redact
from states import STARTUP_ORDER, TABLE, Plan, State, Trigger, entered_by, kept_by

if TYPE_CHECKING:
    from lifecycle.engine._context import Context
    from lifecycle.log import AuditLog
    from lifecycle.runtime import Phase, PhaseSet, Runtime

ENTERS: dict[Trigger, State] = {t: dest for t in Trigger if (dest := entered_by(t)) is not None}
"""The state each forward trigger enters, whose phase it runs."""
RELEASE_KEEP: dict[Trigger, State] = {t: kept for t in Trigger if (kept := kept_by(t)) is not None}
"""What each releasing trigger keeps, as the table says (`Transition.keeps`)."""
RESUMING = frozenset(row.trigger for row in TABLE if row.keeps is not None and row.dest in STARTUP_ORDER)
"""Triggers that release and go on with the startup (rebuild, restart): they arm the tripwires again."""


class EntryWork:
    """VALIDATE's log-directory work, the releases, and the mutation check."""

    plan: Plan
    _config: RunConfig
    _log: AuditLog
    _log_dir: Path | None
    _runtime: Runtime
    _phases: PhaseSet
    _snapshot: Snapshot | None
    _phase_logged_validation: bool
    _pending_error: BaseException | None

    @property
    def state(self) -> State:
        raise NotImplementedError

    def _force_fail(self, reason: str) -> None:
        raise NotImplementedError

    def _check_released(self, keep: State) -> None:
        raise NotImplementedError

    def _phase(self, state: State) -> Phase:
        phase = self._phases.phase_for(state)
        if phase is None:
            raise LookupError(
                f"{type(self._phases).__name__} has no phase for {state.name}; register "
                f"one: phases.register(State.{state.name}, phase)"
            )
        return phase

    def _release_after(self, ctx: Context, keep: State) -> Runtime:
        """Release each state after `keep`, newest first, each phase seeing the runtime the later
        ones left; a failing release does not stop the others, and the first failure is raised."""
        runtime, errors = ctx.runtime, []
        for state in reversed(STARTUP_ORDER[keep.startup_index + 1 :]):
            phase = self._phases.phase_for(state)
            if phase is None:
                continue
            try:
                runtime = phase.release(dataclasses.replace(ctx, runtime=runtime))
            except Exception as exc:  # keep releasing the rest; report the first failure
                errors.append(exc)
        if errors:
            raise errors[0]
        return runtime

    def _validated(self, runtime: Runtime) -> Runtime:
        fingerprint = self._config.fingerprint()
        if runtime.fingerprint is None:
            runtime = dataclasses.replace(runtime, fingerprint=fingerprint)
        existing = self._config.logging.existing
        if self._log_dir is not None:
            problem = check_log_dir(self._log_dir)
            if problem:
                raise ConfigError(f"logging.log_dir: {problem}", field="logging.log_dir", problems=[problem])
            refused = self._log.claim(self._log_dir, existing)
            if refused:
                field, problem = refused
                raise ConfigError(f"{field}: {problem}", field=field, problems=[problem])
        self._snapshot = Snapshot(self._config)
        if not self._phase_logged_validation:
            self._log.emit(
                events.CONFIG_VALIDATED,
                fingerprint=runtime.fingerprint,
                config=redact(self._config.to_dict()),
                environment=self.plan is not Plan.CONVERT,
            )
        if self._log_dir is not None and not self._log.is_open:
            if self._config.logging.otel:  # before open: the held records feed the live spans too
                from lifecycle.export import attach_live_spans

                attach_live_spans(self._log, self._config.logging.otel)
            self._log.open(self._log_dir, overwrite=existing == "overwrite")
        return runtime

    def _release(self, ctx: Context, trigger: Trigger) -> Runtime:
        try:
            runtime = self._release_after(ctx, RELEASE_KEEP[trigger])
        except Exception as exc:
            if trigger is not Trigger.SHUTDOWN:
                raise
            self._log.emit(
                events.TRANSITION_FAILED,
                trigger=trigger.value,
                source=self.state.name,
                error_type=type(exc).__name__,
                error=str(exc),
                duration_s=0.0,
            )
            self._pending_error = exc
            runtime = dataclasses.replace(self._runtime, model=None, optimizer=None, binding=None)
        if trigger is Trigger.RESTART:
            runtime = dataclasses.replace(runtime, generation=self._runtime.generation + 1)
            self._log.rebind(generation=runtime.generation)
            self._log.emit(events.GENERATION_STARTED, reason="restart")
        if trigger is Trigger.SHUTDOWN:
            fields = {}
            if self._log.fault is not None:  # what could not be logged, reported where it can be
                unlogged, lost = self._log.unlogged
                fields = {"log_fault": str(self._log.fault), "unlogged": unlogged, "lost": lost}
            self._log.emit(events.LIFECYCLE_SHUTDOWN, source=self.state.name, **fields)
        return runtime

    def _released(self, trigger: Trigger) -> None:
        """The ledger's check, once neither the runtime nor the phase context holds what was released.
        A survivor is logged (`resource_leaked`) in every case; a rebuild or restart also raises
        ResourceLeak, since the next cycle would stack on it. A shutdown does not: it can run while
        a failed entry work's frames still hold what they built (a log write failing inside it), and
        the process is leaving. The errors the lifecycle holds drop their frames' locals first."""
        _drop_frame_locals(self._pending_error, getattr(self._log, "fault", None))
        try:
            self._check_released(RELEASE_KEEP[trigger])
        except Exception:
            if trigger is not Trigger.SHUTDOWN:
                raise

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
            field=name,
            validated=old,
            current=new,
        )


def _drop_frame_locals(*errors: BaseException | None) -> None:
    """Clear the local variables of every frame in these errors' tracebacks (and their causes)."""
    import traceback

    seen: set[int] = set()
    todo = [e for e in errors if e is not None]
    while todo:
        error = todo.pop()
        if id(error) in seen:
            continue
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)
        todo += [e for e in (error.__cause__, error.__context__) if e is not None]


def default_phases() -> PhaseSet:
    """The real phases on megatron-core (imported only when a lifecycle is made without phases)."""
    from lifecycle.megatron import MegatronPhases

    return MegatronPhases()
