"""The phases on megatron-core: each state's entry work (one module per state), the model providers,
the CPU rehearsal, vocab resolution and the training steps (checkpoints: `lifecycle.resume`).

torch and megatron are imported inside the functions that need them, so importing this package
stays cheap; running any of it costs megatron's ~7 s import once per process.
"""

from __future__ import annotations

from lifecycle.core_entry._phases import PHASES, MegatronPhases

__all__ = [
    "PHASES",
    "MegatronPhases",
]
