"""The engine's own part of some transitions' entry work: finding a state's phase, what VALIDATE adds
(the fingerprint, the log directory claimed from its owner, the snapshot, the validation logged,
the log opened), the releases (each phase after the state the trigger keeps, newest first), and the
mutation check before every transition. A part of `Lifecycle`. It returns runtimes; the driver
assigns them."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from lifecycle.config import Change, Snapshot
from lifecycle.engine._context import Context
from lifecycle.errors import ConfigError, ConfigMutated
from lifecycle.log import records
from lifecycle.redaction import redact_text
from lifecycle.runtime.frames import drop_frame_locals
from states import STARTUP_ORDER, TABLE, Plan, SideEffect, State, Trigger, entered_by, kept_by

if TYPE_CHECKING:
    from lifecycle.engine._failures import Failures
    from lifecycle.engine._ledger import Cycles
    from lifecycle.engine._shared import Shared
    from lifecycle.runtime import Phase, Runtime

ENTERS: dict[Trigger, State] = {t: dest for t in Trigger if (dest := entered_by(t)) is not None}
"""The state each forward trigger enters, whose phase it runs."""
RELEASE_KEEP: dict[Trigger, State] = {t: kept for t in Trigger if (kept := kept_by(t)) is not None}
"""What each releasing trigger keeps, as the table says (`Transition.keeps`)."""
RESUMING = frozenset(row.trigger for row in TABLE if row.keeps is not None and row.dest in STARTUP_ORDER)
"""Triggers that release and go on with the startup (rebuild, restart): they arm the tripwires again."""


class EntryWork:
    """A part of `Lifecycle`: each transition's entry work. It hands the phases their context, runs
    the entered state's phase (VALIDATE adds the log directory, its policy, the snapshot and the
    log), the releases, and the mutation check. Its own state: the config snapshot, whether a phase
    logged the validation itself, and a shutdown's release error held for the end."""

    def __init__(
        self, shared: Shared, *, cycles: Cycles, failures: Failures, declare: Callable[[SideEffect, Runtime], None]
    ) -> None:
        self.shared = shared
        self._cycles = cycles
        self._failures = failures
        self._declare = declare
        self.snapshot: Snapshot | None = None
        self.phase_logged_validation = False
        self.pending_error: BaseException | None = None

    def enter(self, trigger: Trigger, *, rank_known: Callable[[int, int], None]) -> Runtime:
        """Run `trigger`'s work and return the runtime it leaves, which the driver assigns before
        `entered`: the entered state's phase, the release of the states it leaves, or telling the
        phases this rank failed. A phase tells the driver this rank's place by `rank_known`."""
        shared = self.shared
        ctx = Context(
            runtime=shared.runtime,
            trigger=trigger,
            provider=shared.provider,
            plan=shared.plan,
            options=shared.options,
            log_dir=shared.log_dir.path,
            declare=self._declare,
            record=self.emit_from_phase,
            rank_known=rank_known,
        )
        dest = ENTERS.get(trigger)
        if dest is not None:
            runtime = self.phase(dest).enter(ctx)
            return self.validated(runtime) if trigger is Trigger.VALIDATE else runtime
        if trigger in RELEASE_KEEP:
            return self.release(ctx, trigger)  # the context, holding the released runtime, goes with this frame
        if trigger is Trigger.FAIL:
            self._failures.phases_failed(shared.state)
        return shared.runtime

    def entered(self, trigger: Trigger) -> None:
        """Once the driver holds the new runtime: the ledger registers what the entered state made, or
        checks that nothing holds what a release dropped (`released`)."""
        dest = ENTERS.get(trigger)
        if dest is not None and trigger is not Trigger.VALIDATE:
            self._cycles.register(trigger, dest)
        elif trigger in RELEASE_KEEP:
            self.released(trigger)

    def emit_from_phase(self, record: records.Record) -> None:
        if isinstance(record, records.ConfigValidated):
            self.phase_logged_validation = True
        self.shared.log.write(record)

    def phase(self, state: State) -> Phase:
        phase = self.shared.phases.phase_for(state)
        if phase is None:
            raise LookupError(
                f"{type(self.shared.phases).__name__} has no phase for {state.name}; register "
                f"one: phases.register(State.{state.name}, phase)"
            )
        return phase

    def release_after(self, ctx: Context, keep: State) -> Runtime:
        """Release each state after `keep`, newest first, each phase seeing the runtime the later
        ones left; a failing release does not stop the others, and the first failure is raised."""
        runtime, errors = ctx.runtime, []
        for state in reversed(STARTUP_ORDER[keep.startup_index + 1 :]):
            phase = self.shared.phases.phase_for(state)
            if phase is None:
                continue
            try:
                runtime = phase.release(dataclasses.replace(ctx, runtime=runtime))
            except Exception as exc:  # keep releasing the rest; report the first failure
                errors.append(exc)
        if errors:
            raise errors[0]
        return runtime

    def validated(self, runtime: Runtime) -> Runtime:
        """What VALIDATE adds to its phase: the fingerprint, the log directory claimed, the config's
        snapshot, the validation logged, the log opened."""
        runtime = self._fingerprinted(runtime)
        self._cycles.ledger.freeze_heap()  # nothing of the ledger's exists yet: its checks walk only what comes after
        self._claim_log_dir()
        self.snapshot = Snapshot(self.shared.config)
        self._log_validation(runtime)
        self.shared.log_dir.open(self.shared.log)
        return runtime

    def _fingerprinted(self, runtime: Runtime) -> Runtime:
        fingerprint = self.shared.config.fingerprint()
        return runtime if runtime.fingerprint is not None else dataclasses.replace(runtime, fingerprint=fingerprint)

    def _claim_log_dir(self) -> None:
        """Make the log directory this run's (`LogDir.claim`), or raise ConfigError naming why not."""
        refused = self.shared.log_dir.claim(self.shared.log)
        if refused:
            field, problem = refused
            raise ConfigError(f"{field}: {problem}", field=field, problems=[problem])

    def _log_validation(self, runtime: Runtime) -> None:
        """`config_validated`, unless the phase logged it itself."""
        if not self.phase_logged_validation:
            self.shared.log.write(
                records.ConfigValidated(
                    fingerprint=runtime.fingerprint or self.shared.config.fingerprint(),
                    config=records.redacted(self.shared.config.to_dict()),
                    environment=self.shared.plan is not Plan.CONVERT,
                )
            )

    def release(self, ctx: Context, trigger: Trigger) -> Runtime:
        try:
            runtime = self.release_after(ctx, RELEASE_KEEP[trigger])
        except Exception as exc:
            if trigger is not Trigger.SHUTDOWN:
                raise  # a restart's is counted as begun: the driver moves to `next_generation`
            self.shared.log.write(
                records.TransitionFailed(
                    trigger=trigger.value,
                    source=self.shared.state.name,
                    error_type=type(exc).__name__,
                    error=redact_text(str(exc)),
                    duration_s=0.0,
                )
            )
            self.pending_error = exc
            runtime = dataclasses.replace(self.shared.runtime, model=None, optimizer=None, binding=None)
        if trigger is Trigger.RESTART:
            runtime = self.next_generation(runtime)
        return runtime

    def _shut_down(self) -> None:
        """The shutdown's record, after the ledger's probe: what is still alive (`leaked`, once) and,
        after a log fault, what could not be logged, reported where it can be."""
        leaked: list[dict[str, str]] | records.UnsetType = records.UNSET
        with contextlib.suppress(Exception):  # a probe that raises must not cost the shutdown its record
            leaked = self._cycles.alive_at_shutdown(RELEASE_KEEP[Trigger.SHUTDOWN]) or records.UNSET
        record = records.LifecycleShutdown(source=self.shared.state.name, leaked=leaked)
        if self.shared.log.fault is not None:
            unlogged, lost = self.shared.log.unlogged
            record = msgspec.structs.replace(record, log_fault=str(self.shared.log.fault), unlogged=unlogged, lost=lost)
        self.shared.log.write(record)

    def next_generation(self, runtime: Runtime) -> Runtime:
        """`runtime` in the generation after this lifecycle's, which later records carry. A restart
        whose release failed counts too: it began a new generation. Ranks may still differ in
        generation (one restarted by a wrapper while at VALIDATED makes one restart fewer), so
        rendezvous keys never name it (`Runtime.rendezvous_generation`)."""
        runtime = dataclasses.replace(runtime, generation=self.shared.runtime.generation + 1)
        self.shared.log.rebind(generation=runtime.generation)
        self.shared.log.write(records.GenerationStarted(reason="restart"))
        return runtime

    def released(self, trigger: Trigger) -> None:
        """The ledger's check, once neither the runtime nor the phase context holds what was released.
        A rebuild or restart logs a survivor (`resource_leaked`) and raises ResourceLeak, since the
        next cycle would stack on it, once the phases' `settle_s` has passed without the survivor
        ending (it is probed again meanwhile). A shutdown neither waits nor raises: it can run while
        a failed entry work's frames still hold what they built (a log write failing inside it), and
        the process is leaving; its survivors are in its own record (`leaked`). The errors the
        lifecycle holds drop their frames' locals first."""
        drop_frame_locals(self.pending_error, getattr(self.shared.log, "fault", None))
        if trigger is Trigger.SHUTDOWN:
            self._shut_down()
        else:
            self._cycles.check_released(RELEASE_KEEP[trigger])

    def check_mutation(self, trigger: Trigger | None) -> None:
        if self.snapshot is None or not self.shared.runtime.validated:
            return
        changes = self.snapshot.changes()
        if not changes:
            changes = [Change(name, old, new) for name, old, new in self.shared.phases.drift(self.shared.runtime)]
        if not changes:
            return
        for name, old, new in changes:
            self.shared.log.write(records.ConfigMutated(field=name, validated=old, current=new))
        name, old, new = changes[0]
        self._failures.force_fail(f"config_mutated: {name}")
        raise ConfigMutated(
            f"{name} changed after VALIDATED ({old!r} -> {new!r}){f' before {trigger.value}' if trigger else ''}: "
            "configs are frozen "
            "once validated; build a new RunConfig (dataclasses.replace) and a new Lifecycle instead",
            field=name,
            validated=old,
            current=new,
        )
