from __future__ import annotations

import importlib.util

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lifecycle import ConfigError, RunConfig, events
from lifecycle.core_entry import services_ready
from lifecycle.core_entry.vocab import resolve_vocab_size
from states import SideEffect, Trigger
from tests.phase_context import RecordingContext

sizes = st.integers(min_value=1, max_value=300_000)
maybe = st.none() | sizes


@given(explicit=maybe, restored=maybe, tok=maybe, div=st.integers(1, 512), tp=st.integers(1, 64))
def test_vocab_precedence_is_explicit_then_checkpoint_then_padded_tokenizer(
    explicit: int | None, restored: int | None, tok: int | None, div: int, tp: int
) -> None:
    args = (explicit, restored, tok, div, tp)
    if explicit is not None and tok is not None and explicit < tok:
        with pytest.raises(ConfigError, match="smaller than the tokenizer's"):
            resolve_vocab_size(*args)
    elif explicit is not None:
        assert resolve_vocab_size(*args) == (explicit, "explicit")
    elif restored is not None:
        assert resolve_vocab_size(*args) == (restored, "checkpoint")
    elif tok is not None:
        size, source = resolve_vocab_size(*args)
        assert source == "tokenizer"
        assert size % (div * tp) == 0 and tok <= size < tok + div * tp
    else:
        with pytest.raises(ConfigError, match="no vocab size"):
            resolve_vocab_size(*args)


def _start(*overrides: str) -> tuple[RecordingContext, object]:
    config = RunConfig.preset("tiny-gpt", list(overrides))
    ctx = RecordingContext.for_config(config, trigger=Trigger.START_SERVICES)
    return ctx, services_ready.enter(ctx)


def test_the_default_null_tokenizer_behaves_as_megatrons_and_its_vocab_is_padded() -> None:
    import torch.distributed as dist

    from lifecycle.core_entry.compat import megatron_null_tokenizer, null_tokenizer_eod_in_vocab

    ctx, runtime = _start()
    megatrons = megatron_null_tokenizer(1000)
    # end-of-document is one id past 1000 before megatron-core 0.18, the last of the 1000 from 0.18
    assert runtime.tokenizer.vocab_size == megatrons.vocab_size == (1000 if null_tokenizer_eod_in_vocab() else 1001)
    assert runtime.tokenizer.eod == megatrons.eod
    assert runtime.tokenizer.tokenize("5 17 999") == megatrons.tokenize("5 17 999") == [5, 17, 999]
    assert runtime.tokenizer.detokenize([5, 17]) == megatrons.detokenize([5, 17])
    assert (runtime.vocab_size, runtime.vocab_source) == (1024, "tokenizer")
    assert ctx.side_effects == [SideEffect.TOKENIZER]
    assert ctx.emitted == [
        (
            events.SERVICES_READY,
            {
                "tokenizer": type(runtime.tokenizer).__name__,
                "vocab_size": 1024,
                "vocab_source": "tokenizer",
            },
        )
    ]
    assert not dist.is_initialized()


def test_padding_uses_the_multiple_times_tensor_parallel_size() -> None:
    _, runtime = _start("model.make_vocab_size_divisible_by=100", "parallel.tp=3")
    assert (runtime.vocab_size, runtime.vocab_source) == (1200, "tokenizer")


def test_an_explicit_vocab_wins_over_a_restored_one_and_the_tokenizer() -> None:
    _, runtime = _start("model.vocab_size=2000", "checkpoint.vocab_size=1536")
    assert (runtime.vocab_size, runtime.vocab_source) == (2000, "explicit")
    _, runtime = _start("checkpoint.vocab_size=1536")
    assert (runtime.vocab_size, runtime.vocab_source) == (1536, "checkpoint")


def test_without_a_tokenizer_the_vocab_must_be_explicit_or_restored() -> None:
    ctx, runtime = _start("tokenizer.build=false", "checkpoint.vocab_size=640")
    assert runtime.tokenizer is None and runtime.vocab_source == "checkpoint"
    assert SideEffect.TOKENIZER not in ctx.side_effects
    with pytest.raises(ConfigError, match="no vocab size"):
        _start("tokenizer.build=false")


def test_timers_are_megatrons_and_release_drops_every_service() -> None:
    from megatron.core.timers import Timers

    ctx, runtime = _start("logging.timers=true")
    assert isinstance(runtime.writers["timers"], Timers)
    assert ctx.side_effects == [SideEffect.TOKENIZER, SideEffect.WRITERS]
    released = services_ready.release(ctx, runtime)
    assert released.tokenizer is None and dict(released.writers) == {}
    assert not released.services_ready and released.vocab_size is None


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="tensorboard is not installed")
def test_a_tensorboard_writer_is_opened_and_closed(tmp_path: object) -> None:
    ctx, runtime = _start(f"logging.tensorboard_dir={tmp_path}/tb")
    assert "tensorboard" in runtime.writers
    services_ready.release(ctx, runtime)
