"""The only code that writes Megatron's scheduler callbacks.

`bind_callbacks(model, optimizer, ddp_config)` installs them on `get_model_config(model[0])` (what
megatron's schedules read), verifies, and returns a frozen `BindingReport`; `unbind_callbacks`
clears them. Importing this package imports neither torch nor megatron.
"""

from __future__ import annotations

from bindings._bind import bind_callbacks, per_chunk, unbind_callbacks
from bindings._protocol import SLOTS, Policy, SchedulerConfig
from bindings._report import BindingReport
from bindings._watchdog import CountingFinalizer, FirstStepWatchdog

__all__ = [
    "SLOTS",
    "BindingReport",
    "CountingFinalizer",
    "FirstStepWatchdog",
    "Policy",
    "SchedulerConfig",
    "bind_callbacks",
    "per_chunk",
    "unbind_callbacks",
]
