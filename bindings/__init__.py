"""The only code that writes Megatron's scheduler callbacks. Imports only `states`.

`bind_callbacks(model, optimizer, ddp_config)` installs them on `get_model_config(model[0])` (what
megatron's schedules read), verifies, and returns a frozen `BindingReport`; `unbind_callbacks`
clears them. `check(model, ddp_config, optimizer)` judges a binding anyone made, by the same rules
(`_rules.py`); `guard_first_step(model)` checks, in any loop, that training steps finalize once.
Their parts, for a scheduler config you already hold (no megatron needed): `check_config`,
`inspect_slots`, `judge_slot`, `describe_slot`, `reachable_configs`, `model_chunks`,
`unwrap_finalizer`; `guard_config`, `scale_owner`.
`check_settings(model, requested(...))` checks that every setting asked for reached the objects the
runtime reads (each chunk's config, DDP config, the optimizer's); `compare_settings` and
`settings_targets` are its parts, `DERIVATIONS` what megatron legitimately changes.
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
from bindings._derivations import DERIVATIONS, Derivation
from bindings._entry import check, check_settings, guard_first_step, guard_forward_step
from bindings._errors import BindingConflict, BindingError, FinalizerNotCalled, SettingsNotLanded
from bindings._guard import FirstStepGuard, guard_config, scale_owner
from bindings._protocol import SLOTS, Policy, SchedulerConfig
from bindings._report import BindingReport
from bindings._rules import per_chunk, sources
from bindings._settings import Mismatch, Requested, SettingsReport, requested, same_value
from bindings._settings import compare as compare_settings
from bindings._targets import settings_targets
from bindings._verdict import CheckReport, ConfigSeen, SlotCheck, Verdict
from bindings._watchdog import (
    FIRST_STEP_FINALIZED,
    FIRST_STEP_NOT_FINALIZED,
    CountingFinalizer,
    FirstStepWatchdog,
)

__all__ = [
    "DERIVATIONS",
    "FIRST_STEP_FINALIZED",
    "FIRST_STEP_NOT_FINALIZED",
    "SLOTS",
    "BindingConflict",
    "BindingError",
    "BindingReport",
    "CheckReport",
    "ConfigSeen",
    "CountingFinalizer",
    "Derivation",
    "FinalizerNotCalled",
    "FirstStepGuard",
    "FirstStepWatchdog",
    "Mismatch",
    "Policy",
    "Requested",
    "SchedulerConfig",
    "SettingsNotLanded",
    "SettingsReport",
    "SlotCheck",
    "Verdict",
    "bind_callbacks",
    "check",
    "check_config",
    "check_settings",
    "compare_settings",
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
    "requested",
    "resume_param_sync",
    "same_value",
    "scale_owner",
    "settings_targets",
    "sources",
    "unbind_callbacks",
    "unwrap_finalizer",
]
