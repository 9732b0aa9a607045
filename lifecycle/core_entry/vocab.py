"""Vocab-size resolution in one place, after the tokenizer exists (pure, no torch)."""

from __future__ import annotations

from typing import Literal

from lifecycle.errors import ConfigError

VocabSource = Literal["explicit", "checkpoint", "tokenizer"]


def padded_vocab_size(tokenizer_vocab: int, divisible_by: int, tp: int) -> int:
    """The tokenizer's size rounded up to a multiple of `divisible_by × tp` (megatron's padding)."""
    multiple = divisible_by * tp
    return -(-tokenizer_vocab // multiple) * multiple


def resolve_vocab_size(
    explicit: int | None,
    restored: int | None,
    tokenizer_vocab: int | None,
    divisible_by: int,
    tp: int,
) -> tuple[int, VocabSource]:
    """An explicit size wins, then a checkpoint-restored one, then the tokenizer's padded.

    An explicit size smaller than the tokenizer's is an error: token ids would index past the
    embedding table.
    """
    for name, value in (("divisible_by", divisible_by), ("tp", tp)):
        if value < 1:
            raise ConfigError(f"{name}={value} must be at least 1", field=name, problems=[name])
    if explicit is not None:
        if tokenizer_vocab is not None and explicit < tokenizer_vocab:
            raise ConfigError(
                f"model.vocab_size={explicit} is smaller than the tokenizer's {tokenizer_vocab} "
                f"ids; set model.vocab_size >= {tokenizer_vocab} or remove it to pad automatically",
                field="model.vocab_size",
                problems=["model.vocab_size"],
            )
        return explicit, "explicit"
    if restored is not None:
        return restored, "checkpoint"
    if tokenizer_vocab is None:
        raise ConfigError(
            "no vocab size: no tokenizer was built and none is explicit or restored; set "
            "model.vocab_size (or checkpoint.vocab_size), or tokenizer.build=true",
            field="model.vocab_size",
            problems=["model.vocab_size"],
        )
    return padded_vocab_size(tokenizer_vocab, divisible_by, tp), "tokenizer"
