"""MODEL_BUILT pieces that need no megatron: provider resolution, vocab padding, TE guard."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lifecycle import RunConfig
from lifecycle.core_entry.model_built import init_te_user_buffers
from lifecycle.core_entry.providers import PROVIDERS, model_inputs, padded_vocab_size
from lifecycle.core_entry.user_providers import resolve_provider
from lifecycle.errors import ConfigError, ProviderError


def test_no_provider_means_the_tiny_gpt_provider() -> None:
    assert resolve_provider(None) is PROVIDERS["gpt"]
    assert resolve_provider("copying") is PROVIDERS["copying"]


def test_an_unknown_provider_name_lists_the_known_ones() -> None:
    with pytest.raises(ProviderError, match="gpt, copying, gpt-builder, hybrid-builder"):
        resolve_provider("omni")


def test_a_non_callable_provider_is_refused_with_the_expected_shape() -> None:
    with pytest.raises(ProviderError, match="pre_process, post_process, vp_stage"):
        resolve_provider(42)


def test_vocab_is_padded_to_a_multiple_of_divisor_times_tp() -> None:
    assert padded_vocab_size(1000, 128, 1) == 1024
    assert padded_vocab_size(1024, 128, 2) == 1024
    assert padded_vocab_size(1025, 128, 2) == 1280


def test_model_inputs_use_the_vocab_the_services_resolved() -> None:
    run = RunConfig.from_dict({"model": {"seq_length": 64}, "tokenizer": {"vocab_size": 10}})
    assert model_inputs(run, 300).vocab_size == 384
    assert model_inputs(run, None).vocab_size == 128
    assert model_inputs(run, None).max_position_embeddings == 64


def test_tp_comm_overlap_without_transformer_engine_names_the_extra() -> None:
    try:
        import transformer_engine  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("transformer-engine is installed here")
    with pytest.raises(ConfigError, match=r"megatron-lifecycle\[te\]"):
        init_te_user_buffers(RunConfig(), SimpleNamespace(tp_comm_overlap=True))


def test_no_tp_comm_overlap_initializes_no_user_buffers() -> None:
    assert init_te_user_buffers(RunConfig(), SimpleNamespace(tp_comm_overlap=False)) is False


@pytest.mark.parametrize(("release", "hybrid"), [((0, 18, 2), False), ((0, 19, 2), True)])
def test_only_the_shipped_providers_get_a_hybrid_config_where_gptmodel_is_deprecated(
    monkeypatch: pytest.MonkeyPatch,
    release: tuple[int, ...],
    hybrid: bool,
) -> None:
    from lifecycle.core_entry import compat
    from lifecycle.core_entry.providers import GPTBuilder, HybridBuilder, builds_hybrid

    monkeypatch.setattr(compat, "megatron_core_version", lambda: release)
    shipped = [*PROVIDERS.values(), GPTBuilder(), HybridBuilder()]
    assert [builds_hybrid(p) for p in shipped] == [hybrid] * 4

    def mine(config: object, **_: object) -> None: ...

    assert builds_hybrid(mine) is False


@pytest.mark.parametrize(
    ("layers", "pp", "vpp", "pattern"),
    [
        (4, 1, None, "*-*-"),
        (8, 2, None, "*-*-|*-*-"),
        (8, 2, 2, "*-|*-|*-|*-"),
        (16, 2, 2, "*-*-|*-*-|*-*-|*-*-"),
    ],
)
def test_the_hybrid_pattern_has_one_segment_per_pipeline_and_virtual_stage(
    layers: int,
    pp: int,
    vpp: int | None,
    pattern: str,
) -> None:
    from lifecycle.testing import layer_pattern

    config = SimpleNamespace(
        num_layers=layers, pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vpp
    )
    assert layer_pattern(config) == pattern
