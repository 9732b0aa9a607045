from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest

from lifecycle import ConfigError, ConfigMutated, RunConfig, events
from lifecycle.drift import config_drift, require_unchanged, snapshot_config
from lifecycle.validation import Environment, check_names, probe_environment, validate
from states import Plan
from states.entry import validated
from tests.phase_context import RecordingContext

CPU = Environment(env={"MASTER_ADDR": "h", "MASTER_PORT": "1"})
GPU_CONFIG = ["backend=nccl", "model.transformer_impl=transformer_engine"]


def test_intrinsic_validation_ignores_what_this_machine_lacks() -> None:
    config = RunConfig.preset("tiny-gpt", GPU_CONFIG)
    assert validate(config, environment=False) == []
    kinds = {(p.kind, p.field) for p in validate(config, CPU)}
    assert ("environment", "backend") in kinds and (
        "environment",
        "model.transformer_impl",
    ) in kinds
    with_gpu = dataclasses.replace(CPU, cuda=True, modules=frozenset({"transformer_engine"}))
    assert validate(config, with_gpu) == []


def test_a_missing_transformer_engine_names_the_extra_to_install() -> None:
    config = RunConfig.preset("tiny-gpt", GPU_CONFIG)
    fixes = [p.fix for p in validate(config, dataclasses.replace(CPU, cuda=True))]
    assert any("pip install megatron-lifecycle[te]" in fix for fix in fixes)


def test_the_convert_plan_validates_intrinsic_checks_only() -> None:
    config = RunConfig.preset("tiny-gpt", GPU_CONFIG)
    ctx = RecordingContext.for_config(config, plan=Plan.CONVERT)
    runtime = validated.enter(ctx)
    assert runtime.fingerprint == config.fingerprint()
    assert ctx.emitted[-1][1]["environment"] is False
    with pytest.raises(ConfigError):
        validated.enter(RecordingContext.for_config(config, plan=Plan.TRAINING))


def test_a_valid_config_is_fingerprinted_and_logged_redacted() -> None:
    config = RunConfig.preset("tiny-gpt")
    ctx = RecordingContext.for_config(config)
    runtime = validated.enter(ctx)
    assert runtime.validated and runtime.fingerprint == config.fingerprint()
    event, fields = ctx.emitted[0]
    assert event == events.CONFIG_VALIDATED
    assert fields["fingerprint"] == config.fingerprint() and fields["environment"] is True
    assert fields["config"]["tokenizer"]["vocab_size"] == 1000  # tokenizer fields are no secret
    assert ctx.side_effects == []


def test_the_error_lists_every_problem_and_survives_pickling() -> None:
    config = RunConfig.preset("tiny-gpt", ["parallel.tp=3", "model.num_layers=3", "parallel.pp=2"])
    with pytest.raises(ConfigError) as info:
        validated.enter(RecordingContext.for_config(config))
    again = pickle.loads(pickle.dumps(info.value))
    assert isinstance(again, ConfigError)
    assert [p.field for p in again.problems] == info.value.fields
    assert {"model.num_attention_heads", "model.num_layers"} <= set(again.fields)
    assert "problem(s)" in str(again)


def test_the_launcher_environment_is_read_by_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "1")
    config = RunConfig.preset("tiny-gpt", ["parallel.tp=2"])
    assert probe_environment(config).env["WORLD_SIZE"] == "3"
    assert [(p.check, p.field) for p in validate(config)] == [("launcher", "WORLD_SIZE")]


def test_the_validation_doc_lists_every_check() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "validation.md").read_text()
    for name, kind in check_names():
        assert f"`{name}`" in doc, name
        assert kind in doc


def test_a_run_config_mutated_behind_frozen_is_reported_with_the_field() -> None:
    config = RunConfig.preset("tiny-gpt")
    snap = snapshot_config(config)
    object.__setattr__(config.parallel, "tp", 2)
    assert config_drift(snap, config) == [("parallel.tp", 1, 2)]
    with pytest.raises(ConfigMutated) as info:
        require_unchanged(snap, config, what="the run config")
    assert info.value.field == "parallel.tp" and "was 1, is now 2" in str(info.value)


@dataclasses.dataclass
class _Plain:
    layers: list[int]
    hook: object = None


def test_in_place_edits_and_replaced_callables_are_drift_unless_ignored() -> None:
    obj = _Plain(layers=[1, 2])
    snap = snapshot_config(obj)
    obj.layers.append(3)
    obj.hook = print
    assert [d[0] for d in config_drift(snap, obj)] == ["hook", "layers"]
    assert [d[0] for d in config_drift(snap, obj, ignore={"hook"})] == ["layers"]
