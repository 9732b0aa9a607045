"""Per-event rules: one function per startup-log event the audit looks inside (docs/log-format.md)."""

from __future__ import annotations

from collections.abc import Callable
from sys import intern
from typing import TYPE_CHECKING, Any

from lifecycle.audit._records import Segment, unreadable
from lifecycle.log import events
from states import PLAN_TARGETS, State

if TYPE_CHECKING:
    from lifecycle.audit._rank import RankAudit

_CAP = 256
_STATES = frozenset(s.name for s in State)
_TRIGGERS_REBIND = frozenset({"rebuild", "restart"})
_BOUND = State.CALLBACKS_BOUND.name
_PLAN_TARGETS = {plan.value: state.name for plan, state in PLAN_TARGETS.items()}
_VALIDATED, _SHUT_DOWN, _FAILED = State.VALIDATED.name, State.SHUT_DOWN.name, State.FAILED.name


def _str(audit: RankAudit, rec: dict[str, Any], key: str, *, optional: bool = False) -> Any:
    value = rec.get(key)
    if type(value) is str or (optional and value is None):
        return value
    raise unreadable(audit.source, audit.line,
                     f"{rec.get('event')}: field {key!r} is {repr(value)[:60]}, expected a str")


def _state(audit: RankAudit, rec: dict[str, Any], key: str) -> str:
    value = _str(audit, rec, key)
    if value not in _STATES:
        raise unreadable(audit.source, audit.line,
                         f"{rec.get('event')}: field {key!r} is {value[:60]!r}, not a state name")
    return str(value)


def started(audit: RankAudit, rec: dict[str, Any], ts: float) -> None:
    audit.plan = _str(audit, rec, "plan", optional=True)
    if rec.get("target") is not None:
        audit.target = _state(audit, rec, "target")
    elif audit.plan in _PLAN_TARGETS:  # an older record without `target`: the plan decides it
        audit.target = _PLAN_TARGETS[audit.plan]


def transition_started(audit: RankAudit, rec: dict[str, Any], ts: float) -> None:
    audit.open_trigger = _str(audit, rec, "trigger")
    audit.open_start = ts


def transition_completed(audit: RankAudit, rec: dict[str, Any], ts: float) -> None:
    # Interned: every rank holds the same few names, once in memory and once per pickle.
    trigger = intern(_str(audit, rec, "trigger"))
    dest = intern(_state(audit, rec, "dest"))
    start = audit.open_start if audit.open_trigger == trigger else ts
    if len(audit.segments) < _CAP:
        audit.segments.append(Segment(dest, trigger, start, ts, audit.generation))
    if len(audit.transitions) < _CAP:
        audit.transitions.append((trigger, dest))
    fingerprint = rec.get("config_fingerprint")
    if fingerprint is not None and audit.fingerprint is not None and fingerprint != audit.fingerprint:
        audit.flag("LA005", f"{trigger!r} completed with config fingerprint {str(fingerprint)[:16]}, "
                   f"but VALIDATED fingerprinted {audit.fingerprint[:16]}: the config changed")
    if dest == _FAILED and audit.failure is None:  # `lc.fail(reason)`: no transition_failed before it
        reason = rec.get("reason")
        audit.failure = (f"{trigger!r} moved the rank to FAILED from state {audit.state}"
                         + (f": {str(reason)[:200]}" if reason else ""))
    audit.state = dest
    audit.open_trigger = None
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


def transition_failed(audit: RankAudit, rec: dict[str, Any], ts: float) -> None:
    trigger = _str(audit, rec, "trigger")
    error_type = rec.get("error_type")
    audit.failure = (f"{trigger!r} failed in state {audit.state} with {error_type}: "
                     f"{str(rec.get('error'))[:200]}")
    audit.state = _FAILED
    audit.open_trigger = None


def config_validated(audit: RankAudit, rec: dict[str, Any], ts: float) -> None:
    audit.fingerprint = _str(audit, rec, "fingerprint")
    audit.validated = True


def config_mutated(audit: RankAudit, rec: dict[str, Any], ts: float) -> None:
    audit.flag("LA005", f"config field {str(rec.get('field'))!r} changed after VALIDATED: "
               f"validated {str(rec.get('validated'))[:60]}, now {str(rec.get('current'))[:60]}")


def side_effect(audit: RankAudit, rec: dict[str, Any], ts: float) -> None:
    if not audit.validated:
        audit.flag("LA001", f"side effect {str(rec.get('kind'))!r} (trigger {rec.get('trigger')!r}) "
                   f"in state {audit.state}, before the config was VALIDATED")


def tripwire(audit: RankAudit, rec: dict[str, Any], ts: float) -> None:
    trigger = rec.get("trigger")
    during = f"during {trigger!r}" if trigger is not None else "outside any transition"
    audit.flag("LA012", f"tripwire on {str(rec.get('target'))!r} ({rec.get('kind')}, owned by "
               f"{rec.get('owner')!r}) fired in state {rec.get('state')} {during} "
               f"with policy {rec.get('policy')!r}")


def model_built(audit: RankAudit, rec: dict[str, Any], ts: float) -> None:
    audit.model_gen = True
    audit.model_id = _str(audit, rec, "model_config_id", optional=True)
    if audit.rebind_pending:
        audit.rebuilt = True


def callbacks_bound(audit: RankAudit, rec: dict[str, Any], ts: float) -> None:
    target = _str(audit, rec, "target_id", optional=True)
    scheduler = _str(audit, rec, "scheduler_config_id", optional=True)
    if not audit.model_gen:
        audit.flag("LA002", f"callbacks bound in state {audit.state} of generation "
                   f"{audit.generation} before any model_built record")
    if target != scheduler:
        audit.flag("LA003", f"callbacks bound to {target} ({rec.get('target_type')}), but the scheduler "
                   f"reads config {scheduler}: the scheduler will not call them")
    if audit.rebind_pending:
        if target != audit.model_id:
            old = " — the old model's config" if target is not None and target == audit.old_model_id else ""
            audit.flag("LA004", f"after the rebuild/restart at line {audit.rebind_line}, callbacks were "
                       f"bound to {target}{old}, not the rebuilt model's config {audit.model_id}")
        audit.rebind_pending = False


def step_completed(audit: RankAudit, rec: dict[str, Any], ts: float) -> None:
    if audit.rebind_pending and audit.rebuilt and audit.target == _BOUND:
        audit._flag_no_rebind("trained")


def first_step_not_finalized(audit: RankAudit, rec: dict[str, Any], ts: float) -> None:
    audit.flag("LA011", f"the first training step called the gradient finalizer "
               f"{rec.get('finalizer_calls')} times, not once: gradients were not synchronized correctly")


def imports(audit: RankAudit, rec: dict[str, Any], ts: float) -> None:
    """The heavy-import step is its own segment; the open state's time excludes the main thread's wait."""
    values = [rec.get(key) for key in ("started_ts", "duration_s", "waited_s")]
    if not all(type(v) in (int, float) for v in values):
        raise unreadable(audit.source, audit.line, "imports: fields 'started_ts', 'duration_s' and "
                         "'waited_s' must be numbers")
    start, duration, waited = (float(v) for v in values)  # type: ignore[arg-type]  # checked above
    if len(audit.segments) < _CAP:
        audit.segments.append(Segment(events.IMPORTS, events.IMPORTS, start, start + duration, audit.generation))
    if audit.open_trigger is not None:
        audit.open_start = min(audit.open_start + waited, ts)


def shutdown(audit: RankAudit, rec: dict[str, Any], ts: float) -> None:
    audit.shut = True


Handler = Callable[["RankAudit", dict[str, Any], float], None]

HANDLERS: dict[str, Handler] = {
    events.LIFECYCLE_STARTED: started,
    events.TRANSITION_STARTED: transition_started,
    events.TRANSITION_COMPLETED: transition_completed,
    events.TRANSITION_FAILED: transition_failed,
    events.CONFIG_VALIDATED: config_validated,
    events.CONFIG_MUTATED: config_mutated,
    events.SIDE_EFFECT: side_effect,
    events.TRIPWIRE_VIOLATION: tripwire,
    events.MODEL_BUILT: model_built,
    events.CALLBACKS_BOUND: callbacks_bound,
    events.STEP_COMPLETED: step_completed,
    events.FIRST_STEP_NOT_FINALIZED: first_step_not_finalized,
    events.LIFECYCLE_SHUTDOWN: shutdown,
    events.IMPORTS: imports,
}


def _table(validated: bool, rebind_pending: bool) -> dict[str, Handler | None]:
    """Every event -> its handler, or None where nothing needs checking in this situation: side
    effects only matter before VALIDATED, steps only while a rebind is pending."""
    table: dict[str, Handler | None] = dict.fromkeys(events.ALL)
    table.update(HANDLERS)
    if validated:
        table[events.SIDE_EFFECT] = None
    if not rebind_pending:
        table[events.STEP_COMPLETED] = None
    return table


TABLES: dict[tuple[bool, bool], dict[str, Handler | None]] = {
    (v, r): _table(v, r) for v in (False, True) for r in (False, True)
}
