"""`lifecycle run` as a user runs it: torchrun with 2 ranks, then `lifecycle audit` on its logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.child_python import run_lifecycle

pytestmark = pytest.mark.slow


lifecycle = run_lifecycle


def test_two_rank_run_reaches_callbacks_bound_trains_and_audits_clean(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    run = lifecycle(
        "run",
        "--preset",
        "tiny-gpt",
        "--nproc",
        "2",
        "--steps",
        "2",
        "--log-dir",
        str(logs),
        "--set",
        "model.hidden_size=32",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for state in ("VALIDATED", "SERVICES_READY", "DISTRIBUTED", "MODEL_BUILT", "CALLBACKS_BOUND"):
        assert f"✓ {state}" in run.stdout
    assert "imports" in run.stdout and "megatron" in run.stdout  # the import time named beside VALIDATED
    assert "step 2/2: loss" in run.stdout
    assert sorted(p.name for p in logs.iterdir()) == [".lifecycle.lock", "rank-00000.jsonl", "rank-00001.jsonl"]
    audit = lifecycle("audit", str(logs), "--format", "json")
    assert audit.returncode == 0, audit.stdout[-2000:]
    report = json.loads(audit.stdout)
    assert report["findings"] == []
    # megatron-core 0.19 deprecates GPTModel; the shipped provider builds what it recommends
    assert [w for w in report["warnings"] if "GPTModel IS DEPRECATED" in w["message"]] == []


def test_an_invalid_config_fails_at_validated_with_every_problem_named_and_exit_1(tmp_path: Path) -> None:
    run = lifecycle(
        "run",
        "--preset",
        "tiny-gpt",
        "--log-dir",
        str(tmp_path / "logs"),
        "--set",
        "parallel.tp=3",
        "--set",
        "model.num_layers=3",
        "--set",
        "parallel.pp=2",
    )
    assert run.returncode == 1
    assert "ConfigError" in run.stderr and "num_attention_heads" in run.stderr and "num_layers" in run.stderr
    records = (
        [json.loads(x) for x in (tmp_path / "logs" / "rank-00000.jsonl").read_text().splitlines()]
        if (tmp_path / "logs").exists()
        else []
    )
    assert not any(r["event"] == "side_effect" for r in records)


def test_a_misspelt_override_exits_2_naming_the_nearest_key() -> None:
    run = lifecycle("run", "--preset", "tiny-gpt", "--set", "parallel.tpp=2")
    assert run.returncode == 2 and "did you mean 'parallel.tp'" in run.stderr


def test_a_provider_its_module_does_not_define_is_refused_in_one_line_before_the_launch(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    spec = "tests.integration.hostile_callables:no_such_provider"
    run = lifecycle("run", "--nproc", "2", "--provider", spec, "--log-dir", str(logs))
    assert (run.returncode, run.stdout) == (2, ""), run.stderr[-3000:]
    assert run.stderr == (
        f"lifecycle run: --provider {spec!r}: tests.integration.hostile_callables defines no 'no_such_provider'; "
        "its top-level names: annotations, exits_zero, hangs, os, sys, time\n"
    )
    assert not logs.exists()  # no rank started
