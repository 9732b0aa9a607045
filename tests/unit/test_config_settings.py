"""The config a settings check reads: `settings.allow_mismatch` (a list of field names, from YAML,
`--set` and code) and the activation-recompute fields, refused at VALIDATED in the combinations
megatron's `TransformerConfig.__post_init__` would refuse at MODEL_BUILT."""

from __future__ import annotations

import pytest

from lifecycle import RunConfig
from lifecycle.config import validate
from lifecycle.errors import ConfigError


@pytest.mark.parametrize(
    "text",
    ["[hidden_dropout, ddp.bucket_size]", "hidden_dropout,ddp.bucket_size", "['hidden_dropout','ddp.bucket_size']"],
)
def test_allow_mismatch_reads_a_list_of_names_from_set(text: str) -> None:
    config = RunConfig.preset("tiny-gpt", [f"settings.allow_mismatch={text}"])
    assert config.settings.allow_mismatch == ("hidden_dropout", "ddp.bucket_size")


def test_allow_mismatch_from_yaml_is_a_frozen_tuple_and_defaults_to_none() -> None:
    config = RunConfig.from_dict({"settings": {"allow_mismatch": ["hidden_dropout"]}})
    assert config.settings.allow_mismatch == ("hidden_dropout",)
    assert RunConfig().settings.allow_mismatch == ()
    assert RunConfig.from_dict(config.to_dict()) == config


def test_allow_mismatch_that_is_not_a_list_of_names_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict({"settings": {"allow_mismatch": [1, 2]}})
    assert "settings.allow_mismatch: expected a list of names such as [a, b]" in str(info.value)


RECOMPUTE = {
    "full without a method or a layer count": (
        ["model.recompute_granularity=full"],
        {"model.recompute_method", "model.recompute_num_layers"},
    ),
    "selective with a layer count": (
        ["model.recompute_granularity=selective", "model.recompute_num_layers=2"],
        {"model.recompute_num_layers"},
    ),
    "a method without a granularity": (["model.recompute_method=uniform"], {"model.recompute_granularity"}),
    "full, uniform, one layer": (
        ["model.recompute_granularity=full", "model.recompute_method=uniform", "model.recompute_num_layers=1"],
        set(),
    ),
    "selective alone": (["model.recompute_granularity=selective"], set()),
}


@pytest.mark.parametrize("case", sorted(RECOMPUTE))
def test_recompute_combinations_megatron_refuses_are_refused_at_validation_naming_the_field(case: str) -> None:
    overrides, fields = RECOMPUTE[case]
    problems = [
        p for p in validate(RunConfig.preset("tiny-gpt", overrides), environment=False) if p.check == "recompute"
    ]
    assert {p.field for p in problems} == fields
    assert all(p.fix for p in problems)
