"""Per-event rules: one function per startup-log event the audit looks inside (docs/log-format.md).

Called for a few records per transition, in the reader's hot loop: plain reads, no helpers on the
common path. A handler gets its event's struct (`_reads`): each field it reads as its type in the
log's schema, or None where the record lacks it (on both of the reader's paths); a handler checks a
value's presence and meaning, not its type.
"""

from __future__ import annotations

from sys import intern

from lifecycle.audit import _cycles, _failures, _groups, _ordering, _reads, _resume, _settings, _steps
from lifecycle.audit._fields import Handler, handler
from lifecycle.audit._records import Segment, unreadable
from lifecycle.audit._rules import RuleId
from lifecycle.audit._state import TRAINS_AT, RankState
from lifecycle.log import events
from states import PLAN_TARGETS, State, Trigger, rebinds

_CAP = 256
_STATES = {s.name: s.name for s in State}
_TRIGGERS = {t.value: t.value for t in Trigger}
_TRIGGERS_REBIND = frozenset(t.value for t in Trigger if rebinds(t))
_PLAN_TARGETS = {plan.value: state.name for plan, state in PLAN_TARGETS.items()}
_VALIDATED, _SHUT_DOWN, _FAILED = State.VALIDATED.name, State.SHUT_DOWN.name, State.FAILED.name
_new_segment = tuple.__new__  # Segment(...) runs a Python-level __new__; this builds the same tuple in C


def _bad(audit: RankState, event: str, key: str, value: str | None, want: str) -> Exception:
    return unreadable(audit.source, audit.line, f"{event}: field {key!r} is {repr(value)[:60]}, expected {want}")


def _str(audit: RankState, event: str, key: str, value: str | None) -> str:
    if type(value) is str:
        return value
    raise _bad(audit, event, key, value, "a str")


def _state(audit: RankState, event: str, key: str, value: str | None) -> str:
    name = _STATES.get(value) if type(value) is str else None
    if name is None:
        raise _bad(audit, event, key, value, "a state name")
    return name


def _trigger(audit: RankState, event: str, trigger: str | None) -> str:
    # Interned: every rank holds the same few names, once in memory and once per pickle.
    if type(trigger) is not str:
        raise _bad(audit, event, "trigger", trigger, "a str")
    return _TRIGGERS.get(trigger) or intern(trigger)


def started(audit: RankState, rec: _reads.LifecycleStarted, ts: float) -> None:
    audit.host = rec.host
    audit.launched = rec.launcher == "lifecycle run"
    attempt = rec.attempt
    if attempt is not None and attempt > 0:  # a new attempt continuing this log
        _new_attempt(audit)
        audit.attempt_no = attempt
        audit.cycles.setdefault((attempt, 0), {})  # joined with the other ranks' by `attempts`
    audit.plan = rec.plan
    if rec.target is not None:
        audit.target = _state(audit, rec.event, "target", rec.target)
    elif audit.plan in _PLAN_TARGETS:  # an older record without `target`: the plan decides it
        audit.target = _PLAN_TARGETS[audit.plan]
    audit.trains = TRAINS_AT.get(audit.target)


def _new_attempt(audit: RankState) -> None:
    """The same run id came back (torchrun elastic restart): judge the rank by its latest attempt."""
    _cycles.process_ended(audit)
    audit.state = State.CONFIGURED.name
    audit.validated = audit.shut = audit.model_gen = audit.rebind_pending = audit.rebuilt = False
    audit.fingerprint = audit.failure = audit.open_trigger = audit.model_id = audit.old_model_id = None
    audit.transitions = []
    audit.bound_steps, audit.first_step_logged = 0, True


def transition_started(audit: RankState, rec: _reads.TransitionStarted, ts: float) -> None:
    trigger = rec.trigger
    if type(trigger) is not str:
        raise _bad(audit, rec.event, "trigger", trigger, "a str")
    audit.open_trigger = _TRIGGERS.get(trigger) or intern(trigger)
    audit.open_start = ts


def transition_completed(audit: RankState, rec: _reads.TransitionCompleted, ts: float) -> None:
    raw = rec.trigger
    if type(raw) is not str:
        raise _bad(audit, rec.event, "trigger", raw, "a str")
    trigger = _TRIGGERS.get(raw) or intern(raw)
    reached = rec.dest
    dest = _STATES.get(reached) if type(reached) is str else None
    if dest is None:
        raise _bad(audit, rec.event, "dest", reached, "a state name")
    start = audit.open_start if audit.open_trigger == trigger else ts
    if start > ts:  # the clock went backwards (LA017): a zero duration, never a negative one
        start = ts
    if len(audit.segments) < _CAP:
        audit.segments.append(_new_segment(Segment, (dest, trigger, start, ts, audit.generation)))
    if len(audit.transitions) < _CAP:
        audit.transitions.append((trigger, dest))
    _changed_or_failed(audit, rec, trigger, dest, ts)
    audit.state = dest
    audit.open_trigger = None
    _entered(audit, trigger, dest)


def _changed_or_failed(audit: RankState, rec: _reads.TransitionCompleted, trigger: str, dest: str, ts: float) -> None:
    """A completed transition's config fingerprint (LA005), and `lc.fail(reason)`'s failure."""
    fingerprint = rec.config_fingerprint
    if fingerprint is not None and audit.fingerprint is not None and fingerprint != audit.fingerprint:
        audit.flag(
            RuleId.CONFIG_CHANGED_AFTER_VALIDATED,
            f"{trigger!r} completed with config fingerprint {str(fingerprint)[:16]}, "
            f"but VALIDATED fingerprinted {audit.fingerprint[:16]}: the config changed",
        )
    if dest == _FAILED:  # `lc.fail(reason)`: no transition_failed before it
        reason = rec.reason
        because = f": {str(reason)[:200]}" if reason else ""
        _failures.fail(
            audit,
            "restart" if _failures.restart_request(None, reason) else "failed",
            ts,
            f"{trigger!r} moved the rank to FAILED from state {audit.state}{because}",
            trigger=trigger,
        )


def _entered(audit: RankState, trigger: str, dest: str) -> None:
    """What reaching `dest` by `trigger` settles: validation, recovery, a pending rebind, shutdown."""
    if dest == _VALIDATED:
        audit.validated = True
    if dest == audit.target:
        audit.failure = None
    if trigger in _TRIGGERS_REBIND:
        audit.old_model_id = audit.model_id
        audit.model_id = None
        audit.rebind_pending = True
        audit.rebuilt = False
        audit.rebind_line = audit.line
    elif dest == _SHUT_DOWN:
        audit.shut = True


def transition_failed(audit: RankState, rec: _reads.TransitionFailed, ts: float) -> None:
    trigger = _trigger(audit, rec.event, rec.trigger)
    message = f"{trigger!r} failed in state {audit.state} with {rec.error_type}: {str(rec.error)[:200]}"
    _failures.failed_transition(audit, ts, message, trigger, rec.error_type, rec.field)
    audit.state = _FAILED
    audit.open_trigger = None


def config_validated(audit: RankState, rec: _reads.ConfigValidated, ts: float) -> None:
    audit.fingerprint = _str(audit, rec.event, "fingerprint", rec.fingerprint)
    audit.validated = True


def config_mutated(audit: RankState, rec: _reads.ConfigMutated, ts: float) -> None:
    audit.flag(
        RuleId.CONFIG_CHANGED_AFTER_VALIDATED,
        f"config field {str(rec.field)!r} changed after VALIDATED: "
        f"validated {str(rec.validated)[:60]}, now {str(rec.current)[:60]}",
    )


def tripwire(audit: RankState, rec: _reads.TripwireViolation, ts: float) -> None:
    trigger = rec.trigger
    during = f"during {trigger!r}" if trigger is not None else "outside any transition"
    audit.flag(
        RuleId.TRIPWIRE_VIOLATION,
        f"tripwire on {str(rec.target)!r} ({rec.kind}, owned by "
        f"{rec.owner!r}) fired in state {rec.state} {during} "
        f"with policy {rec.policy!r}",
    )


def model_built(audit: RankState, rec: _reads.ModelBuilt, ts: float) -> None:
    audit.model_gen = True
    audit.model_id = rec.model_config_id
    if audit.rebind_pending:
        audit.rebuilt = True


def callbacks_bound(audit: RankState, rec: _reads.CallbacksBound, ts: float) -> None:
    target = rec.target_id
    scheduler = rec.scheduler_config_id
    _ordering.binding_ordered(audit)
    if target != scheduler:
        audit.flag(
            RuleId.BINDING_WRONG_TARGET,
            f"callbacks bound to {target} ({rec.target_type}), but the scheduler "
            f"reads config {scheduler}: the scheduler will not call them",
        )
    if audit.rebind_pending:
        if target != audit.model_id:
            old = " — the old model's config" if target is not None and target == audit.old_model_id else ""
            audit.flag(
                RuleId.REBUILD_WITHOUT_REBIND,
                f"after the rebuild/restart at line {audit.rebind_line}, callbacks were "
                f"bound to {target}{old}, not the rebuilt model's config {audit.model_id}",
            )
        audit.rebind_pending = False
    _steps.on_bound(audit)


def callbacks_unbound(audit: RankState, rec: _reads.CallbacksUnbound, ts: float) -> None:
    _steps.close_binding(audit)


def step_completed(audit: RankState, rec: _reads.StepCompleted, ts: float) -> None:
    if audit.rebind_pending and audit.rebuilt and audit.trains is not None:
        audit.flag_no_rebind("trained")
        return
    _steps.on_step(audit)


def first_step_finalized(audit: RankState, rec: _reads.FirstStepFinalized, ts: float) -> None:
    _steps.on_first_step(audit)


def first_step_not_finalized(audit: RankState, rec: _reads.FirstStepNotFinalized, ts: float) -> None:
    _steps.on_first_step(audit)
    audit.flag(
        RuleId.FIRST_STEP_NOT_FINALIZED,
        f"the first training step called the gradient finalizer "
        f"{rec.finalizer_calls} times, not once: gradients were not synchronized correctly",
    )


def imports(audit: RankState, rec: _reads.Imports, ts: float) -> None:
    """The heavy-import step is its own segment; the open state's time excludes the main thread's wait."""
    start, duration, waited = rec.started_ts, rec.duration_s, rec.waited_s
    if start is None or duration is None or waited is None:
        raise unreadable(
            audit.source, audit.line, "imports: fields 'started_ts', 'duration_s' and 'waited_s' must be numbers"
        )
    if len(audit.segments) < _CAP:
        audit.segments.append(Segment(events.IMPORTS, events.IMPORTS, start, start + duration, audit.generation))
    if audit.open_trigger is not None:
        audit.open_start = min(audit.open_start + waited, ts)


def shutdown(audit: RankState, rec: _reads.LifecycleShutdown, ts: float) -> None:
    """`leaked`: what the ledger found still alive at the shutdown (older logs: `resource_leaked`
    records after this one)."""
    audit.shut = True
    leaked = rec.leaked or ()
    for entry in leaked[:64]:
        _failures.leak(audit, entry.get("resource"), entry.get("state"))


def simulation(audit: RankState, rec: _reads.SimulationStarted, ts: float) -> None:
    value = rec.simulated
    if value is None or value < 1:
        raise unreadable(
            audit.source,
            audit.line,
            f"{rec.event}: field 'simulated' is {repr(value)[:60]}, expected a positive int",
        )
    audit.simulated = value


WARNINGS_CAP = 32
"""Distinct warnings kept per rank; more are not listed (the log keeps them all)."""


def callback_replaced(audit: RankState, rec: _reads.CallbackReplaced, ts: float) -> None:
    """A write to a callback slot during Megatron-LM's `train()` by someone else than `train()` (the
    drop-in lets it through, as Megatron-LM does): the scheduler still reaches a finalizer unless the
    write left `finalize_model_grads_func` unbound."""
    if rec.slot != "finalize_model_grads_func" or rec.now != "None":
        return
    writer, was = str(rec.writer)[:120], str(rec.was)[:120]
    audit.flag(
        RuleId.FINALIZER_UNBOUND,
        f"{writer} set finalize_model_grads_func to None (it was {was}) during train(): the scheduler skips "
        "gradient finalization from then on; wrap the finalizer instead of clearing it",
    )


def warning(audit: RankState, rec: _reads.Warned, ts: float) -> None:
    key = (
        _str(audit, rec.event, "category", rec.category),
        _str(audit, rec.event, "module", rec.module),
        _str(audit, rec.event, "message", rec.message),
    )
    held = audit.warnings
    if key in held:
        held[key] += 1
    elif len(held) < WARNINGS_CAP:
        held[key] = 1


def rank_simulated(audit: RankState, rec: _reads.RankSimulated, ts: float) -> None:
    """`counts`: per state entered, what the simulated rank created and issued (process groups,
    collectives); kept for `--blame`. Absent in logs of older simulations."""
    value = rec.counts
    if value is not None:
        audit.counts = {state[:40]: {k[:40]: v for k, v in row.items()} for state, row in list(value.items())[:32]}


HANDLERS: dict[str, Handler] = {
    events.LIFECYCLE_STARTED: handler(started),
    events.TRANSITION_STARTED: handler(transition_started),
    events.TRANSITION_COMPLETED: handler(transition_completed),
    events.TRANSITION_FAILED: handler(transition_failed),
    events.STARTUP_ABORTED: handler(_failures.startup_aborted),
    events.PEER_FAILED: handler(_failures.peer_failed),
    events.STATE_TIMEOUT: handler(_failures.state_timeout),
    events.CONFIG_VALIDATED: handler(config_validated),
    events.CONFIG_MUTATED: handler(config_mutated),
    events.SIDE_EFFECT: handler(_ordering.side_effect),
    events.TRIPWIRE_VIOLATION: handler(tripwire),
    events.MODEL_BUILT: handler(model_built),
    events.SETTINGS_CHECKED: handler(_settings.settings_checked),
    events.STREAMS_CHECKED: handler(_resume.streams_checked),
    events.TIMEOUTS_READ: handler(_groups.timeouts_read),
    events.GROUP_CREATED: handler(_groups.group_created),
    events.PROCESS_GROUP_ADOPTED: handler(_groups.group_adopted),
    events.CALLBACKS_BOUND: handler(callbacks_bound),
    events.CALLBACKS_UNBOUND: handler(callbacks_unbound),
    events.STEP_COMPLETED: handler(step_completed),
    events.FIRST_STEP_FINALIZED: handler(first_step_finalized),
    events.FIRST_STEP_NOT_FINALIZED: handler(first_step_not_finalized),
    events.LIFECYCLE_SHUTDOWN: handler(shutdown),
    events.SIMULATION_STARTED: handler(simulation),
    events.RANK_SIMULATED: handler(rank_simulated),
    events.IMPORTS: handler(imports),
    events.WARNING: handler(warning),
    events.RESOURCE_LEAKED: handler(_failures.resource_leaked),
    events.CALLBACK_REPLACED: handler(callback_replaced),
    events.CYCLE_STARTED: handler(_cycles.cycle_started),
    events.CYCLE_ENDED: handler(_cycles.cycle_ended),
    events.SIGNAL_RECEIVED: handler(_cycles.signal_received),
    events.RESTARTS_EXHAUSTED: handler(_failures.restarts_exhausted),
}


def _wanted(validated: bool, counting: bool) -> frozenset[str]:
    """The events whose handler can change anything in this situation: side effects only matter
    before VALIDATED (while the ordering rules on them need no more, `_ordering.SIDE_EFFECTS_SETTLE`);
    while `counting` (bound, no rebind pending) a step only adds one to `bound_steps`, which the
    batch reader does for a whole run of steps at once."""
    skip = {events.SIDE_EFFECT} if validated and _ordering.SIDE_EFFECTS_SETTLE else set()
    if counting:
        skip.add(events.STEP_COMPLETED)
    return frozenset(HANDLERS.keys() - skip)


WANTED: dict[tuple[bool, bool], frozenset[str]] = {(v, c): _wanted(v, c) for v in (False, True) for c in (False, True)}
"""By (validated, counting); `counting` is `state == trains and not rebind_pending` (at the plan's
training state, no rebind pending), when step_completed is exactly `_steps.on_step`'s `bound_steps += 1`."""
