"""The ground floor: states, triggers, the transition table as data, the ordering rules, pure guards,
and the root of the error tree. Imports nothing of the project and nothing heavy.

The guards are the ones `TABLE` places on its rows (and docs/state-diagram.md names): the four
ordering guards made by `requiring` from `ORDERING`, and the plan's two. A table row for a new
state reuses them."""

from __future__ import annotations

from states._derived import entered_by as entered_by
from states._derived import kept_by, made_in, rebinds, releases, training_state, trains_in
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
from states._guards import Facts, requiring, rule, unmet
from states._guards import Guard as Guard
from states._ordering import BINDING_NEEDS_A_MODEL as BINDING_NEEDS_A_MODEL
from states._ordering import ORDERING, Ordering
from states._ordering import SIDE_EFFECTS_NEED_VALIDATION as SIDE_EFFECTS_NEED_VALIDATION
from states._table import TABLE, Transition, forward_trigger
from states._table import allowed_triggers as allowed_triggers
from states._table import find as find

__all__ = [
    "ORDERING",
    "PLAN_TARGETS",
    "SIDE_EFFECT_OWNERS",
    "STARTUP_ORDER",
    "TABLE",
    "Facts",
    "GuardRejected",
    "InvalidTransition",
    "LifecycleError",
    "Ordering",
    "Plan",
    "SideEffect",
    "State",
    "Transition",
    "Trigger",
    "forward_trigger",
    "kept_by",
    "made_in",
    "rebinds",
    "releases",
    "requiring",
    "rule",
    "training_state",
    "trains_in",
    "unmet",
]
