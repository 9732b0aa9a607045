"""megatron-lifecycle: Megatron training startup as an explicit, audited finite-state machine.

`import lifecycle` imports neither torch nor megatron; phases import them when they run.
"""

from __future__ import annotations

from lifecycle._errors import (
    BindingConflict,
    BindingError,
    ConfigError,
    ConfigMutated,
    FinalizerNotCalled,
    GuardRejected,
    InvalidTransition,
    LifecycleError,
    PhaseFailed,
    SideEffectBeforeValidation,
    SideEffectError,
    TripwireViolation,
)
from lifecycle.config import RunConfig
from lifecycle.driver import Lifecycle
from lifecycle.inprocess import InProcessPhases
from lifecycle.phases import PhaseContext, PhaseSet, Runtime

__all__ = [
    "BindingConflict",
    "BindingError",
    "ConfigError",
    "ConfigMutated",
    "FinalizerNotCalled",
    "GuardRejected",
    "InProcessPhases",
    "InvalidTransition",
    "Lifecycle",
    "LifecycleError",
    "PhaseContext",
    "PhaseFailed",
    "PhaseSet",
    "RunConfig",
    "Runtime",
    "SideEffectBeforeValidation",
    "SideEffectError",
    "TripwireViolation",
]
