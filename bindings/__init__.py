"""The only code that writes Megatron's scheduler callbacks. Imports only `states`.

`bind_callbacks(model, optimizer, ddp_config)` installs them on `get_model_config(model[0])` (what
megatron's schedules read), verifies, and returns a frozen `BindingReport`; `unbind_callbacks`
clears them. Importing this package imports neither torch nor megatron.
"""

from __future__ import annotations

from bindings._bind import (
    bind_callbacks,
    install,
    pause_param_sync,
    per_chunk,
    planned,
    resume_param_sync,
    unbind_callbacks,
)
from bindings._errors import BindingConflict, BindingError, FinalizerNotCalled
from bindings._protocol import SLOTS, Policy, SchedulerConfig
from bindings._report import BindingReport
from bindings._watchdog import (
    FIRST_STEP_FINALIZED,
    FIRST_STEP_NOT_FINALIZED,
    CountingFinalizer,
    FirstStepWatchdog,
)

__all__ = [
    "FIRST_STEP_FINALIZED",
    "FIRST_STEP_NOT_FINALIZED",
    "SLOTS",
    "BindingConflict",
    "BindingError",
    "BindingReport",
    "CountingFinalizer",
    "FinalizerNotCalled",
    "FirstStepWatchdog",
    "Policy",
    "SchedulerConfig",
    "bind_callbacks",
    "install",
    "pause_param_sync",
    "per_chunk",
    "planned",
    "resume_param_sync",
    "unbind_callbacks",
]
