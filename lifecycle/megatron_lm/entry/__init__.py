"""Entry work done by Megatron-LM's own functions (`megatron.training`), one per state, and the
run of Megatron-LM's `train()` after CALLBACKS_BOUND. Sits beside `lifecycle.megatron`, whose
rehearsal, releases, bindings and step bookkeeping it reuses; torch and megatron are imported
inside functions."""

from __future__ import annotations

from lifecycle.megatron_lm.entry._bound_once import SLOTS, bound_once
from lifecycle.megatron_lm.entry._cuda import cuda_as_cpu
from lifecycle.megatron_lm.entry._derive import args_from_container, disagreements, run_config, run_config_from_yaml
from lifecycle.megatron_lm.entry._phases import MegatronLMCall, MegatronLMPhases
from lifecycle.megatron_lm.entry._providers import KeywordProvider, problem
from lifecycle.megatron_lm.entry._quiet import quiet_library_loggers
from lifecycle.megatron_lm.entry._train import TrainResult, run_training

__all__ = [
    "SLOTS",
    "KeywordProvider",
    "MegatronLMCall",
    "MegatronLMPhases",
    "TrainResult",
    "args_from_container",
    "bound_once",
    "cuda_as_cpu",
    "disagreements",
    "problem",
    "quiet_library_loggers",
    "run_config",
    "run_config_from_yaml",
    "run_training",
]
