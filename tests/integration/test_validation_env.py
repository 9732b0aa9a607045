"""VALIDATED with the environment checks: they probe this machine (torch for CUDA), so they live here."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from lifecycle import ConfigError, Lifecycle, RunConfig, events
from lifecycle.config import probe_environment, validate
from lifecycle.core_entry import validated
from states import Plan
from tests.phase_context import RecordingContext

GPU_CONFIG = ["backend=nccl", "model.transformer_impl=transformer_engine"]


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


def test_validate_judges_the_log_dir_the_lifecycle_was_given_not_the_configs(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("a file, not a directory")
    configured, given = tmp_path / "f" / "logs", tmp_path / "given"  # the config's cannot be created
    config = RunConfig.preset("tiny-gpt", [f"logging.log_dir={configured}"])
    with pytest.raises(ConfigError, match="logging.log_dir"):
        validated.enter(RecordingContext.for_config(config))  # no directory given: the config's is judged
    runtime = validated.enter(RecordingContext.for_config(config, log_dir=given))
    assert runtime.validated
    with Lifecycle(config, log_dir=given, tripwires="off") as lc:
        lc.validate()
    assert [p.name for p in given.glob("rank-*.jsonl")] == ["rank-00000.jsonl"]
