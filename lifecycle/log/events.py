"""Every event name the startup log uses. Values go in fields, never in the name."""

from __future__ import annotations

from typing import Final

import bindings

LIFECYCLE_STARTED: Final = "lifecycle_started"
TRANSITION_STARTED: Final = "transition_started"
TRANSITION_COMPLETED: Final = "transition_completed"
TRANSITION_FAILED: Final = "transition_failed"
STARTUP_ABORTED: Final = "startup_aborted"
SIGNAL_RECEIVED: Final = "signal_received"
PEER_FAILED: Final = "peer_failed"
STATE_TIMEOUT: Final = "state_timeout"
GUARD_REJECTED: Final = "guard_rejected"
INVALID_TRANSITION: Final = "invalid_transition"
CONFIG_VALIDATED: Final = "config_validated"
CONFIG_MUTATED: Final = "config_mutated"
CONFIG_NORMALIZED: Final = "config_normalized"
SIDE_EFFECT: Final = "side_effect"
SIDE_EFFECT_REFUSED: Final = "side_effect_refused"
TRIPWIRE_VIOLATION: Final = "tripwire_violation"
SERVICES_READY: Final = "services_ready"
IMPORTS: Final = "imports"
DISTRIBUTED_INITIALIZED: Final = "distributed_initialized"
PROCESS_GROUP_ADOPTED: Final = "process_group_adopted"
TIMEOUTS_READ: Final = "timeouts_read"
GROUP_CREATED: Final = "group_created"
MODEL_BUILT: Final = "model_built"
SETTINGS_CHECKED: Final = "settings_checked"
CALLBACKS_BOUND: Final = "callbacks_bound"
CALLBACKS_UNBOUND: Final = "callbacks_unbound"
FIRST_STEP_FINALIZED: Final = bindings.FIRST_STEP_FINALIZED
FIRST_STEP_NOT_FINALIZED: Final = bindings.FIRST_STEP_NOT_FINALIZED
STEP_COMPLETED: Final = "step_completed"
PARAM_GATHER_DEFERRED: Final = "param_gather_deferred"
PARAM_GATHER_RESUMED: Final = "param_gather_resumed"
PARAMS_SYNCED: Final = "params_synced"
CHECKPOINT_LOADED: Final = "checkpoint_loaded"
STREAMS_RESTORED: Final = "streams_restored"
STREAMS_CHECKED: Final = "streams_checked"
CHECKPOINT_SAVED: Final = "checkpoint_saved"
GENERATION_STARTED: Final = "generation_started"
LIFECYCLE_SHUTDOWN: Final = "lifecycle_shutdown"
REHEARSAL_ENABLED: Final = "rehearsal_enabled"
REHEARSAL_DISABLED: Final = "rehearsal_disabled"
SIMULATION_STARTED: Final = "simulation_started"
RANK_SIMULATED: Final = "rank_simulated"
LOG_WRITE_FAILED: Final = "log_write_failed"
WARNING: Final = "warning"
CYCLE_STARTED: Final = "cycle_started"
CYCLE_ENDED: Final = "cycle_ended"
RESOURCE_LEAKED: Final = "resource_leaked"
RESOURCE_LINGERED: Final = "resource_lingered"
RESTARTS_EXHAUSTED: Final = "restarts_exhausted"
RESOURCES_HANDED_OVER: Final = "resources_handed_over"
CALLBACK_REPLACED: Final = "callback_replaced"
LAUNCH_ENDED: Final = "launch_ended"

ALL: Final[frozenset[str]] = frozenset(
    value for name, value in dict(globals()).items() if name.isupper() and isinstance(value, str)
)

__all__ = sorted(name for name in dict(globals()) if name.isupper())
