from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from lifecycle import ConfigError, RunConfig
from lifecycle.testing import config_diff as diff
from lifecycle.testing import preset_names


def test_the_tiny_gpt_preset_loads_from_code_with_its_yaml_values() -> None:
    config = RunConfig.preset("tiny-gpt")
    assert "tiny-gpt" in preset_names()
    assert (config.model.num_layers, config.model.hidden_size, config.model.seq_length) == (
        2,
        64,
        32,
    )
    assert config.training.micro_batch_size == 2 and config.backend == "gloo"


def test_overrides_apply_yaml_typed_values_before_freezing() -> None:
    config = RunConfig.preset("tiny-gpt", ["parallel.tp=2", "optimizer.lr=1", "rehearsal=true"])
    assert config.parallel.tp == 2
    assert config.optimizer.lr == 1.0 and isinstance(config.optimizer.lr, float)
    assert config.rehearsal is True


def test_unknown_keys_are_rejected_with_the_nearest_valid_name(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("model:\n  num_layer: 4\nparalel:\n  tp: 2\n")
    with pytest.raises(ConfigError) as info:
        RunConfig.from_yaml(path)
    message = str(info.value)
    assert "'model.num_layer'" in message and "did you mean 'model.num_layers'?" in message
    assert "'paralel'" in message and "did you mean 'parallel'?" in message
    assert len(info.value.problems) == 2


def test_wrong_types_and_choices_are_all_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict({"parallel": {"tp": "two"}, "backend": "mpi", "model": {"dtype": "fp8"}})
    assert len(info.value.problems) == 3
    assert "choose one of 'gloo', 'nccl', 'fake'" in str(info.value)


def test_an_unknown_preset_names_the_closest_one() -> None:
    with pytest.raises(ConfigError, match="did you mean 'tiny-gpt'"):
        RunConfig.preset("tiny-gtp")


def test_a_missing_or_malformed_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        RunConfig.from_yaml(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        RunConfig.from_yaml(bad)


def test_configs_are_frozen_and_derived_with_replace() -> None:
    config = RunConfig.preset("tiny-gpt")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.backend = "nccl"  # type: ignore[misc]
    changed = dataclasses.replace(config, backend="fake")
    assert changed.backend == "fake" and config.backend == "gloo"


def test_the_fingerprint_is_stable_and_changes_with_any_field() -> None:
    a, b = RunConfig.preset("tiny-gpt"), RunConfig.preset("tiny-gpt")
    assert a.fingerprint() == b.fingerprint() and len(a.fingerprint()) == 64
    c = RunConfig.preset("tiny-gpt", ["model.hidden_dropout=0.1"])
    assert c.fingerprint() != a.fingerprint()
    assert diff(a.to_dict(), c.to_dict()) == [("model.hidden_dropout", 0.0, 0.1)]


def test_to_dict_round_trips_through_from_dict() -> None:
    config = RunConfig.preset("tiny-gpt", ["parallel.vpp=2", "checkpoint.load=/x"])
    assert RunConfig.from_dict(config.to_dict()) == config
