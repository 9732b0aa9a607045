"""The only code that writes Megatron's scheduler callbacks. Imports only `states`.

`bind_callbacks(model, optimizer, ddp_config)` installs them on `get_model_config(model[0])` (what
megatron's schedules read), verifies, and returns a frozen `BindingReport`; `unbind_callbacks`
clears them. `check(model, ddp_config, optimizer)` judges a binding anyone made, by the same rules
(`_rules.py`); `guard_first_step(model)` checks, in any loop, that training steps finalize once.
Their parts, for a scheduler config you already hold (no megatron needed): `check_config`,
`inspect_slots`, `judge_slot`, `describe_slot`, `reachable_configs`, `model_chunks`,
`unwrap_finalizer`; `guard_config`, `scale_owner`.
Importing this package imports neither torch nor megatron.
"""

from __future__ import annotations

from bindings._bind import (
    bind_callbacks,
    install,
    pause_param_sync,
    planned,
    resume_param_sync,
    unbind_callbacks,
)
from bindings._check import (
    check_config,
    describe_slot,
    inspect_slots,
    judge_slot,
    model_chunks,
    reachable_configs,
    unwrap_finalizer,
)
from bindings._entry import check, guard_first_step, guard_forward_step
from bindings._errors import BindingConflict, BindingError, FinalizerNotCalled
from bindings._guard import FirstStepGuard, guard_config, scale_owner
from bindings._protocol import SLOTS, Policy, SchedulerConfig
from bindings._report import BindingReport
from bindings._rules import per_chunk, sources
from bindings._verdict import CheckReport, ConfigSeen, SlotCheck, Verdict
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
    "CheckReport",
    "ConfigSeen",
    "CountingFinalizer",
    "FinalizerNotCalled",
    "FirstStepGuard",
    "FirstStepWatchdog",
    "Policy",
    "SchedulerConfig",
    "SlotCheck",
    "Verdict",
    "bind_callbacks",
    "check",
    "check_config",
    "describe_slot",
    "guard_config",
    "guard_first_step",
    "guard_forward_step",
    "inspect_slots",
    "install",
    "judge_slot",
    "model_chunks",
    "pause_param_sync",
    "per_chunk",
    "planned",
    "reachable_configs",
    "resume_param_sync",
    "scale_owner",
    "sources",
    "unbind_callbacks",
    "unwrap_finalizer",
]
