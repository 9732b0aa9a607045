"""The only code that writes Megatron's scheduler callbacks. Imports only `states`.

`bind_callbacks(model, optimizer, ddp_config)` installs them on `get_model_config(model[0])` (what
megatron's schedules read), verifies, and returns a frozen `BindingReport`; `unbind_callbacks`
clears them. `check(model, ddp_config, optimizer)` judges a binding anyone made, by the same rules
(`_rules.py`); `guard_first_step(model)` checks, in any loop, that training steps finalize once.
Their parts, for a scheduler config you already hold (no megatron needed): `check_config`,
`inspect_slots`, `judge_slot`, `describe_slot`, `reachable_configs`, `model_chunks`,
`unwrap_finalizer`; `guard_config`, `scale_owner`.
`check_settings(model, requested(...))` checks that every setting asked for reached the objects the
runtime reads (each chunk's config, DDP config, the optimizer's); `DERIVATIONS` is what megatron
legitimately changes. Names re-exported `as` themselves below serve `lifecycle`, not users.
Importing this package imports neither torch nor megatron.
"""

from __future__ import annotations

from bindings._bind import bind_callbacks, pause_param_sync, resume_param_sync, unbind_callbacks
from bindings._bind import install as install
from bindings._bind import planned as planned
from bindings._check import (
    check_config,
    describe_slot,
    inspect_slots,
    judge_slot,
    model_chunks,
    reachable_configs,
    unwrap_finalizer,
)
from bindings._derivations import DERIVATIONS
from bindings._entry import check, check_settings, guard_first_step, guard_forward_step
from bindings._errors import BindingConflict, BindingError, FinalizerNotCalled, SettingsNotLanded
from bindings._guard import guard_config, scale_owner
from bindings._protocol import SLOTS as SLOTS
from bindings._protocol import DDPConfig as DDPConfig
from bindings._protocol import Module as Module
from bindings._protocol import Optimizer as Optimizer
from bindings._protocol import Policy as Policy
from bindings._protocol import ProcessGroup as ProcessGroup
from bindings._protocol import ProcessGroups as ProcessGroups
from bindings._protocol import SchedulerConfig as SchedulerConfig
from bindings._protocol import SlotValue as SlotValue
from bindings._report import BindingReport
from bindings._rules import per_chunk, sources
from bindings._settings import Requested as Requested
from bindings._settings import SettingsReport as SettingsReport
from bindings._settings import requested
from bindings._verdict import CheckReport, SlotCheck
from bindings._watchdog import FIRST_STEP_FINALIZED as FIRST_STEP_FINALIZED
from bindings._watchdog import FIRST_STEP_NOT_FINALIZED as FIRST_STEP_NOT_FINALIZED
from bindings._watchdog import CountingFinalizer

__all__ = [
    "DERIVATIONS",
    "BindingConflict",
    "BindingError",
    "BindingReport",
    "CheckReport",
    "CountingFinalizer",
    "FinalizerNotCalled",
    "SettingsNotLanded",
    "SlotCheck",
    "bind_callbacks",
    "check",
    "check_config",
    "check_settings",
    "describe_slot",
    "guard_config",
    "guard_first_step",
    "guard_forward_step",
    "inspect_slots",
    "judge_slot",
    "model_chunks",
    "pause_param_sync",
    "per_chunk",
    "reachable_configs",
    "requested",
    "resume_param_sync",
    "scale_owner",
    "sources",
    "unbind_callbacks",
    "unwrap_finalizer",
]
