"""The ground floor: states, triggers, the transition table as data, the ordering rules, pure guards,
and the root of the error tree. Imports nothing of the project and nothing heavy.

The guards are the ones `TABLE` places on its rows (and docs/state-diagram.md names): the four
ordering guards made by `requiring` from `ORDERING`, and the plan's two. A table row for a new
state reuses them."""

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
from states._guards import (
    Facts,
    Guard,
    config_is_validated,
    distributed_is_initialized,
    model_is_built,
    plan_allows_restart,
    plan_reaches_destination,
    requiring,
    rule,
    services_are_ready,
    unmet,
)
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
    "config_is_validated",
    "distributed_is_initialized",
    "entered_by",
    "find",
    "forward_trigger",
    "kept_by",
    "made_in",
    "model_is_built",
    "plan_allows_restart",
    "plan_reaches_destination",
    "rebinds",
    "releases",
    "requiring",
    "rule",
    "services_are_ready",
    "training_state",
    "trains_in",
    "unmet",
]
