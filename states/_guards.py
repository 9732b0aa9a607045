"""Guards: pure predicates over `Facts`. Each docstring's first line is the rule it enforces; the
ordering rules' guards are made from `states._ordering.ORDERING`, the plan's are written here.

A guard never raises and never touches the world; the engine raises `GuardRejected` with the
docstring's rule when one returns False.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from states._enums import PLAN_TARGETS, STARTUP_ORDER, Plan, SideEffect, State, Trigger
from states._ordering import (
    BINDING_NEEDS_A_MODEL,
    DISTRIBUTED_NEEDS_SERVICES,
    MODEL_NEEDS_DISTRIBUTED,
    ORDERING,
    SIDE_EFFECTS_NEED_VALIDATION,
    Ordering,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Facts:
    """What a guard may look at: a snapshot of the lifecycle, never the live objects."""

    state: State
    trigger: Trigger
    dest: State | None = None
    plan: Plan = Plan.TRAINING
    config_validated: bool = False
    services_ready: bool = False
    distributed: bool = False
    model_built: bool = False
    generation: int = 0

    @property
    def target(self) -> State:
        return PLAN_TARGETS[self.plan]

    def has(self, state: State) -> bool:
        """Whether the work of `state` exists now (entered, and not released since)."""
        field = _HELD.get(state)
        if field is None:
            raise ValueError(f"Facts hold nothing for {state.name}: a rule cannot need it (see _HELD)")
        return bool(getattr(self, field))


_HELD: dict[State, str] = {
    State.VALIDATED: "config_validated",
    State.SERVICES_READY: "services_ready",
    State.DISTRIBUTED: "distributed",
    State.MODEL_BUILT: "model_built",
}
"""The field of `Facts` that says a state's work exists."""


Guard = Callable[[Facts], bool]


def requiring(ordering: Ordering) -> Guard:
    """The guard that enforces an ordering rule: the work of `ordering.needs` exists. Named by the
    rule's `guard`, its docstring the rule's `says`."""
    needs = ordering.needs
    if needs not in _HELD:
        raise ValueError(f"{ordering.guard}: Facts hold nothing for {needs.name}, so no guard can need it (see _HELD)")

    def guard(facts: Facts) -> bool:
        return facts.has(needs)

    guard.__name__ = guard.__qualname__ = ordering.guard
    guard.__doc__ = ordering.says
    return guard


config_is_validated = requiring(SIDE_EFFECTS_NEED_VALIDATION)
services_are_ready = requiring(DISTRIBUTED_NEEDS_SERVICES)
distributed_is_initialized = requiring(MODEL_NEEDS_DISTRIBUTED)
model_is_built = requiring(BINDING_NEEDS_A_MODEL)


def unmet(kind: SideEffect, facts: Facts) -> Ordering | None:
    """The first ordering rule (in `ORDERING`'s order: validation first) that a side effect of `kind`
    breaks on `facts`, or None: what the engine's side-effect rules read."""
    return next((o for o in ORDERING if kind in o.kinds and not facts.has(o.needs)), None)


def plan_reaches_destination(facts: Facts) -> bool:
    """A plan stops at its target state: convert never initializes distributed, inference never binds callbacks."""
    dest = facts.dest
    if dest is None or dest not in STARTUP_ORDER:
        return True
    return dest.startup_index <= facts.target.startup_index


def plan_allows_restart(facts: Facts) -> bool:
    """The rl plan shares one startup between training and generation: a second initialization is refused."""
    return facts.plan is not Plan.RL


def rule(guard: Guard) -> str:
    """The ordering rule a guard enforces (its docstring's first line)."""
    doc = guard.__doc__ or guard.__name__
    return doc.strip().splitlines()[0]
