"""megatron-lifecycle: Megatron training startup as an explicit, audited finite-state machine.

`import lifecycle` imports neither torch nor megatron; phases import them when they run.
Named parts (each a package, layered one way): `config`, `log`, `runtime`, `megatron`, `engine`,
`audit`, `cli`; `errors` holds the whole error tree (docs/architecture.md).
"""

from __future__ import annotations

from lifecycle.config import RunConfig
from lifecycle.engine import InProcessPhases, Lifecycle
from lifecycle.errors import (
    BindingConflict,
    BindingError,
    ConfigError,
    ConfigMutated,
    DistributedError,
    ExtraNotInstalled,
    FinalizerNotCalled,
    GuardRejected,
    InvalidTransition,
    LifecycleError,
    LogUnreadable,
    PhaseFailed,
    ProviderError,
    RankFailed,
    RehearsalError,
    SideEffectBeforeValidation,
    SideEffectError,
    StartupAborted,
    TripwireViolation,
)
from lifecycle.log import events
from lifecycle.runtime import Options, PhaseContext, PhaseSet, Runtime

__all__ = [
    "BindingConflict",
    "BindingError",
    "ConfigError",
    "ConfigMutated",
    "DistributedError",
    "ExtraNotInstalled",
    "FinalizerNotCalled",
    "GuardRejected",
    "InProcessPhases",
    "InvalidTransition",
    "Lifecycle",
    "LifecycleError",
    "LogUnreadable",
    "Options",
    "PhaseContext",
    "PhaseFailed",
    "PhaseSet",
    "ProviderError",
    "RankFailed",
    "RehearsalError",
    "RunConfig",
    "Runtime",
    "SideEffectBeforeValidation",
    "SideEffectError",
    "StartupAborted",
    "TripwireViolation",
    "events",
]
