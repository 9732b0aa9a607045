"""The overrides of the `tiny-gpt` preset that the cases run on real ranks start their GPT with: a
smaller model, microbatch and vocabulary than the preset's. A case adds its own after them.

    RunConfig.preset("tiny-gpt", [*tiny_gpt.TINY, *overrides])
"""

from __future__ import annotations

TINY = [
    "model.hidden_size=32",
    "model.num_attention_heads=4",
    "model.seq_length=16",
    "training.micro_batch_size=1",
    "training.num_microbatches=2",
    "tokenizer.vocab_size=200",
]
