"""States, triggers, the transition table and its guards: pure data and predicates, no side effects."""

from __future__ import annotations

from states._enums import (
    PLAN_TARGETS,
    SIDE_EFFECT_OWNERS,
    STARTUP_ORDER,
    TERMINAL,
    Plan,
    SideEffect,
    State,
    Trigger,
)
from states._guards import Facts, Guard, rule
from states._table import TABLE, Transition, allowed_triggers, find, transitions_from

__all__ = [
    "PLAN_TARGETS",
    "SIDE_EFFECT_OWNERS",
    "STARTUP_ORDER",
    "TABLE",
    "TERMINAL",
    "Facts",
    "Guard",
    "Plan",
    "SideEffect",
    "State",
    "Transition",
    "Trigger",
    "allowed_triggers",
    "find",
    "rule",
    "transitions_from",
]
