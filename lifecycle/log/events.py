"""Every event name the startup log uses. Values go in fields, never in the name."""

from __future__ import annotations

from typing import Final

import bindings

LIFECYCLE_STARTED: Final = "lifecycle_started"
TRANSITION_STARTED: Final = "transition_started"
TRANSITION_COMPLETED: Final = "transition_completed"
TRANSITION_FAILED: Final = "transition_failed"
GUARD_REJECTED: Final = "guard_rejected"
INVALID_TRANSITION: Final = "invalid_transition"
CONFIG_VALIDATED: Final = "config_validated"
CONFIG_MUTATED: Final = "config_mutated"
SIDE_EFFECT: Final = "side_effect"
SIDE_EFFECT_REFUSED: Final = "side_effect_refused"
TRIPWIRE_VIOLATION: Final = "tripwire_violation"
SERVICES_READY: Final = "services_ready"
IMPORTS: Final = "imports"
DISTRIBUTED_INITIALIZED: Final = "distributed_initialized"
MODEL_BUILT: Final = "model_built"
CALLBACKS_BOUND: Final = "callbacks_bound"
CALLBACKS_UNBOUND: Final = "callbacks_unbound"
FIRST_STEP_FINALIZED: Final = bindings.FIRST_STEP_FINALIZED
FIRST_STEP_NOT_FINALIZED: Final = bindings.FIRST_STEP_NOT_FINALIZED
STEP_COMPLETED: Final = "step_completed"
GENERATION_STARTED: Final = "generation_started"
LIFECYCLE_SHUTDOWN: Final = "lifecycle_shutdown"
REHEARSAL_ENABLED: Final = "rehearsal_enabled"
REHEARSAL_DISABLED: Final = "rehearsal_disabled"

ALL: Final[frozenset[str]] = frozenset(
    value for name, value in dict(globals()).items() if name.isupper() and isinstance(value, str)
)

__all__ = sorted(name for name in dict(globals()) if name.isupper())
