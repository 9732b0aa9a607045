"""Vocab resolution (lifecycle.core_entry.vocab): precedence, padding and the errors that name the fix.

Pure, no torch: the module is imported without megatron. Kills the mutants scripts/mutation makes.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lifecycle.core_entry.vocab import padded_vocab_size, resolve_vocab_size
from lifecycle.errors import ConfigError


@given(tok=st.integers(1, 300_000), div=st.integers(1, 512), tp=st.integers(1, 64))
def test_the_padded_size_is_the_smallest_multiple_of_divisible_by_times_tp_that_fits(
    tok: int, div: int, tp: int
) -> None:
    size = padded_vocab_size(tok, div, tp)
    assert size % (div * tp) == 0
    assert tok <= size < tok + div * tp


def test_a_tokenizer_size_already_a_multiple_is_not_padded() -> None:
    assert padded_vocab_size(1024, 128, 2) == 1024
    assert resolve_vocab_size(None, None, 1024, 128, 2) == (1024, "tokenizer")


def test_the_tokenizer_size_is_padded_for_tensor_parallelism() -> None:
    assert resolve_vocab_size(None, None, 50257, 128, 2) == (50432, "tokenizer")


def test_an_explicit_size_wins_over_checkpoint_and_tokenizer() -> None:
    assert resolve_vocab_size(60000, 51200, 50257, 128, 1) == (60000, "explicit")


def test_an_explicit_size_equal_to_the_tokenizers_is_accepted() -> None:
    assert resolve_vocab_size(50257, None, 50257, 128, 1) == (50257, "explicit")


def test_an_explicit_size_without_a_tokenizer_is_used_as_given() -> None:
    assert resolve_vocab_size(1000, None, None, 128, 1) == (1000, "explicit")


def test_a_checkpoint_size_wins_over_the_tokenizer() -> None:
    assert resolve_vocab_size(None, 51200, 50257, 128, 1) == (51200, "checkpoint")


def test_an_explicit_size_below_the_tokenizers_names_the_field_and_the_fix() -> None:
    with pytest.raises(ConfigError) as info:
        resolve_vocab_size(50000, None, 50257, 128, 1)
    assert info.value.field == "model.vocab_size"
    assert "model.vocab_size >= 50257" in str(info.value)


def test_no_source_at_all_names_the_three_ways_to_give_one() -> None:
    with pytest.raises(ConfigError) as info:
        resolve_vocab_size(None, None, None, 128, 1)
    assert info.value.field == "model.vocab_size"
    assert "checkpoint.vocab_size" in str(info.value) and "tokenizer.build=true" in str(info.value)


@pytest.mark.parametrize(
    ("divisible_by", "tp", "field"), [(0, 1, "divisible_by"), (128, 0, "tp"), (-1, 1, "divisible_by")]
)
def test_a_padding_factor_below_one_is_refused_naming_it(divisible_by: int, tp: int, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_vocab_size(None, None, 50257, divisible_by, tp)
    assert info.value.field == field
    assert f"{field}={'-1' if divisible_by < 0 else 0} must be at least 1" in str(info.value)


def test_padding_factors_of_one_are_accepted() -> None:
    assert resolve_vocab_size(None, None, 7, 1, 1) == (7, "tokenizer")
