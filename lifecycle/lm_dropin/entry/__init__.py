"""Entry work done by Megatron-LM's own functions (`megatron.training`), one per state, and the
run of Megatron-LM's `train()` after CALLBACKS_BOUND. Sits beside `lifecycle.core_entry`, whose
rehearsal, releases, bindings and step bookkeeping it reuses; torch and megatron are imported
inside functions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lifecycle.lm_dropin.entry._args_dump import masked_dump as masked_dump
from lifecycle.lm_dropin.entry._call import MegatronLMCall as MegatronLMCall
from lifecycle.lm_dropin.entry._derive import args_from_container
from lifecycle.lm_dropin.entry._derive import run_config as run_config
from lifecycle.lm_dropin.entry._derive import run_config_from_yaml as run_config_from_yaml
from lifecycle.lm_dropin.entry._late import LOOKUPS as LOOKUPS
from lifecycle.lm_dropin.entry._late import TRAINING as TRAINING
from lifecycle.lm_dropin.entry._late import late as late
from lifecycle.lm_dropin.entry._left_up import still_up as still_up
from lifecycle.lm_dropin.entry._left_up import teardown as teardown
from lifecycle.lm_dropin.entry._phases import MegatronLMPhases
from lifecycle.lm_dropin.entry._quiet import quiet_library_loggers as quiet_library_loggers
from lifecycle.lm_dropin.entry._train import TrainResult as TrainResult
from lifecycle.lm_dropin.entry._train import run_training as run_training

if TYPE_CHECKING:
    from lifecycle.lm_dropin.entry._call import DatasetProvider as DatasetProvider
    from lifecycle.lm_dropin.entry._call import ForwardStep as ForwardStep

__all__ = [
    "MegatronLMPhases",
    "args_from_container",
]
