"""Facts that follow from the table: what a release keeps, which state a plan trains in, which
triggers make the callbacks be bound again. Computed here from `TABLE`, `SIDE_EFFECT_OWNERS` and
`PLAN_TARGETS`; nothing else in the project spells them."""

from __future__ import annotations

from states._enums import PLAN_TARGETS, SIDE_EFFECT_OWNERS, STARTUP_ORDER, Plan, SideEffect, State, Trigger
from states._table import TABLE


def kept_by(trigger: Trigger) -> State | None:
    """The startup state whose work `trigger`'s release keeps (with all before it); None when it
    releases nothing."""
    for row in TABLE:
        if row.trigger is trigger:
            return row.keeps
    return None


def releases(trigger: Trigger, state: State) -> bool:
    """Whether `trigger`'s release undoes the work done entering `state`."""
    kept = kept_by(trigger)
    return kept is not None and state.startup_index > kept.startup_index


def entered_by(trigger: Trigger) -> State | None:
    """The startup state a forward trigger enters; None for the other triggers."""
    for row in TABLE:
        if row.trigger is trigger and row.dest in STARTUP_ORDER and row.keeps is None:
            return row.dest
    return None


def made_in(kind: SideEffect) -> State:
    """The state whose entry work makes this kind of side effect (its owner's destination)."""
    state = entered_by(SIDE_EFFECT_OWNERS[kind])
    if state is None:
        raise ValueError(f"{kind.value} is owned by {SIDE_EFFECT_OWNERS[kind].value}, which enters no state")
    return state


def training_state(target: State) -> State | None:
    """Where a lifecycle that stops at `target` runs training steps: the target itself, when the
    callbacks are bound on the way there; None when the plan stops before they are."""
    bound = made_in(SideEffect.CALLBACKS)
    return target if target.startup_index >= bound.startup_index else None


def trains_in(plan: Plan) -> State | None:
    """The state `plan` trains in (its target when it binds callbacks), or None."""
    return training_state(PLAN_TARGETS[plan])


def rebinds(trigger: Trigger) -> bool:
    """Whether, after `trigger`, the callbacks must be bound again before training: it releases the
    binding and the lifecycle goes on (a rebuild or a restart; not a shutdown)."""
    dests = {row.dest for row in TABLE if row.trigger is trigger}
    return releases(trigger, made_in(SideEffect.CALLBACKS)) and dests <= set(STARTUP_ORDER)
