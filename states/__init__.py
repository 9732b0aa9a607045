"""The ground floor: states, triggers, the transition table as data, the ordering rules, pure guards,
and the root of the error tree. Imports nothing of the project and nothing heavy."""

from __future__ import annotations

from states._derived import entered_by, kept_by, made_in, rebinds, releases, training_state, trains_in
from states._enums import (
    PLAN_TARGETS,
    SIDE_EFFECT_OWNERS,
    STARTUP_ORDER,
    Plan,
    SideEffect,
    State,
    Trigger,
)
from states._errors import GuardRejected, InvalidTransition, LifecycleError
from states._guards import Facts, Guard, requiring, rule
from states._ordering import (
    BINDING_NEEDS_A_MODEL,
    DISTRIBUTED_NEEDS_SERVICES,
    MODEL_NEEDS_DISTRIBUTED,
    ORDERING,
    SIDE_EFFECTS_NEED_VALIDATION,
    Ordering,
)
from states._table import TABLE, Transition, allowed_triggers, find, forward_trigger

__all__ = [
    "BINDING_NEEDS_A_MODEL",
    "DISTRIBUTED_NEEDS_SERVICES",
    "MODEL_NEEDS_DISTRIBUTED",
    "ORDERING",
    "PLAN_TARGETS",
    "SIDE_EFFECTS_NEED_VALIDATION",
    "SIDE_EFFECT_OWNERS",
    "STARTUP_ORDER",
    "TABLE",
    "Facts",
    "Guard",
    "GuardRejected",
    "InvalidTransition",
    "LifecycleError",
    "Ordering",
    "Plan",
    "SideEffect",
    "State",
    "Transition",
    "Trigger",
    "allowed_triggers",
    "entered_by",
    "find",
    "forward_trigger",
    "kept_by",
    "made_in",
    "rebinds",
    "releases",
    "requiring",
    "rule",
    "training_state",
    "trains_in",
]
