"""A megatron TransformerConfig changed after VALIDATED is reported with the field that changed."""

from __future__ import annotations

import pytest

from lifecycle import ConfigMutated
from lifecycle.config import CALLBACK_FIELDS, config_drift, require_unchanged, snapshot_config


def _config() -> object:
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, params_dtype=torch.float32)


def test_an_untouched_transformer_config_has_no_drift() -> None:
    config = _config()
    assert config_drift(snapshot_config(config), config) == []


def test_a_changed_transformer_config_field_is_named_with_old_and_new_values() -> None:
    import torch

    config = _config()
    snap = snapshot_config(config)
    config.hidden_dropout = 0.5  # type: ignore[attr-defined]
    config.params_dtype = torch.bfloat16  # type: ignore[attr-defined]
    assert config_drift(snap, config) == [
        ("hidden_dropout", 0.1, 0.5),
        ("params_dtype", torch.float32, torch.bfloat16),
    ]
    with pytest.raises(ConfigMutated) as info:
        require_unchanged(snap, config, what="the TransformerConfig")
    assert info.value.field == "hidden_dropout"
    assert info.value.fields == ["hidden_dropout", "params_dtype"]


def test_bound_callbacks_are_drift_unless_the_callback_slots_are_ignored() -> None:
    config = _config()
    snap = snapshot_config(config)
    config.finalize_model_grads_func = print  # type: ignore[attr-defined]
    assert [d[0] for d in config_drift(snap, config)] == ["finalize_model_grads_func"]
    assert config_drift(snap, config, ignore=CALLBACK_FIELDS) == []
