"""Everything that imports torch or megatron: each state's entry work (one module per state), the
model providers, the CPU rehearsal, vocab resolution and the training steps.

torch and megatron are imported inside the functions that need them, so importing this package
stays cheap; running any of it costs megatron's ~7 s import once per process.
"""

from __future__ import annotations

from lifecycle.megatron._hybrid import layer_pattern, local_stack_spec
from lifecycle.megatron._imports import ImportJob
from lifecycle.megatron._liveness import host_key, process_alive, store_closed
from lifecycle.megatron._phases import PHASES, MegatronPhases

__all__ = [
    "PHASES",
    "ImportJob",
    "MegatronPhases",
    "host_key",
    "layer_pattern",
    "local_stack_spec",
    "process_alive",
    "store_closed",
]
