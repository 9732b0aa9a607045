"""Guards: pure predicates over `Facts`. Each docstring's first line is the ordering rule it enforces.

A guard never raises and never touches the world; the engine raises `GuardRejected` with the
docstring's rule when one returns False.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from states._enums import PLAN_TARGETS, STARTUP_ORDER, Plan, State, Trigger


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


Guard = Callable[[Facts], bool]


def config_is_validated(facts: Facts) -> bool:
    """Side effects need a validated config: services, process groups and RNG start only after VALIDATED."""
    return facts.config_validated


def services_are_ready(facts: Facts) -> bool:
    """Runtime services (tokenizer, vocab size, writers) exist before distributed and RNG setup."""
    return facts.services_ready


def distributed_is_initialized(facts: Facts) -> bool:
    """Process groups, parallel state and RNG exist before a model is (re)built: Megatron's layers read them."""
    return facts.distributed


def model_is_built(facts: Facts) -> bool:
    """Callbacks are bound only to a built model: the scheduler reads get_model_config(model[0])."""
    return facts.model_built


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
