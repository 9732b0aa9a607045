"""Resuming a run where it stopped: the checkpoints (megatron's `dist_checkpointing`, Megatron-LM's
layout), the random streams and optimizer counts a resume brings back, the window from the load to
the first step that checks nothing moved them, and `lifecycle verify-resume`'s digests. MODEL_BUILT
loads, `lifecycle.core_entry.train.save_after_steps` saves; torch and megatron load inside functions.
"""

from __future__ import annotations

from lifecycle.resume.streams import watch_data

__all__ = ["watch_data"]
