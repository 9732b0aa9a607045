"""Entry work done by Megatron-LM's own functions (`megatron.training`), one per state, and the
run of Megatron-LM's `train()` after CALLBACKS_BOUND. Sits beside `lifecycle.megatron`, whose
rehearsal, releases, bindings and step bookkeeping it reuses; torch and megatron are imported
inside functions."""

from __future__ import annotations

from lifecycle.megatron_lm.entry._call import MegatronLMCall as MegatronLMCall
from lifecycle.megatron_lm.entry._derive import args_from_container
from lifecycle.megatron_lm.entry._derive import run_config as run_config
from lifecycle.megatron_lm.entry._derive import run_config_from_yaml as run_config_from_yaml
from lifecycle.megatron_lm.entry._phases import MegatronLMPhases
from lifecycle.megatron_lm.entry._quiet import quiet_library_loggers as quiet_library_loggers
from lifecycle.megatron_lm.entry._train import TrainResult as TrainResult
from lifecycle.megatron_lm.entry._train import run_training as run_training

__all__ = [
    "MegatronLMPhases",
    "args_from_container",
]
