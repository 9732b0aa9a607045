"""`lifecycle run` as a user runs it: torchrun with 2 ranks, then `lifecycle audit` on its logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.child_python import run_lifecycle

pytestmark = pytest.mark.slow


lifecycle = run_lifecycle


@pytest.mark.release_independent  # the CLI's launch and audit; the floor trains 2 ranks in test_lifecycle_real
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
    names = [".lifecycle.lock", "launcher-00000.jsonl", "rank-00000.jsonl", "rank-00001.jsonl"]
    assert sorted(p.name for p in logs.iterdir()) == names  # the launcher's own record: one per node agent
    audit = lifecycle("audit", str(logs), "--format", "json")
    assert audit.returncode == 0, audit.stdout[-2000:]
    report = json.loads(audit.stdout)
    assert report["findings"] == []
    # megatron-core 0.19 deprecates GPTModel; the shipped provider builds what it recommends
    assert [w for w in report["warnings"] if "GPTModel IS DEPRECATED" in w["message"]] == []


@pytest.mark.release_independent  # the lifecycle's own VALIDATED rules and exit 1: no rank builds
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


@pytest.mark.release_independent
def test_a_misspelt_override_exits_2_naming_the_nearest_key() -> None:
    run = lifecycle("run", "--preset", "tiny-gpt", "--set", "parallel.tpp=2")
    assert run.returncode == 2 and "did you mean 'parallel.tp'" in run.stderr


@pytest.mark.release_independent
def test_a_provider_its_module_does_not_define_is_refused_in_one_line_before_the_launch(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    spec = "tests.integration.hostile_callables:no_such_provider"
    run = lifecycle("run", "--nproc", "2", "--provider", spec, "--log-dir", str(logs))
    assert (run.returncode, run.stdout) == (2, ""), run.stderr[-3000:]
    assert run.stderr == (
        f"lifecycle run: --provider {spec!r}: tests.integration.hostile_callables defines no 'no_such_provider'; "
        "its top-level names: annotations, exits_zero, hangs, os, sys, time.\n"
    )
    assert not logs.exists()  # no rank started


@pytest.mark.release_independent
def test_a_rank_failure_under_nproc_2_ends_with_the_ranks_own_lines_not_torchruns_traceback(tmp_path: Path) -> None:
    provider = tmp_path / "fails_on_rank_1.py"
    provider.write_text(
        "import os\n"
        "from lifecycle.core_entry.providers import PROVIDERS\n"
        "def provider(config, *, pre_process, post_process, vp_stage, inputs):\n"
        "    if os.environ['RANK'] == '1':\n"
        "        raise RuntimeError('injected: rank 1 cannot build')\n"
        "    return PROVIDERS['gpt'](config, pre_process=pre_process, post_process=post_process, vp_stage=vp_stage,"
        " inputs=inputs)\n"
    )
    logs = tmp_path / "logs"
    run = lifecycle("run", "--nproc", "2", "--steps", "0", "--provider", f"{provider}:provider", "--log-dir", str(logs))
    assert run.returncode == 1, run.stderr[-3000:]
    assert "Traceback" not in run.stderr and "ChildFailedError" not in run.stderr, run.stderr[-3000:]
    assert "lifecycle run: rank 1 failed: PhaseFailed: build_model failed in DISTRIBUTED: RuntimeError: injected" in (
        run.stderr
    )
    [summary] = [line for line in run.stderr.splitlines() if line.startswith("lifecycle run: the launch failed: ")]
    assert "rank 1 " in summary and summary.endswith(f"(`lifecycle audit {logs}` names the cause)."), summary


def test_the_distributed_optimizer_saving_without_apex_or_te_is_refused_once_and_nothing_launched(
    tmp_path: Path,
) -> None:
    import importlib.util

    if importlib.util.find_spec("apex") or importlib.util.find_spec("transformer_engine"):
        pytest.skip("Apex or Transformer Engine is installed: the distributed optimizer's checkpoints work")
    logs = tmp_path / "logs"
    run = lifecycle(
        "run",
        "--nproc",
        "2",
        "--set",
        "ddp.use_distributed_optimizer=true",
        "--set",
        f"checkpoint.save={tmp_path / 'ckpt'}",
        "--log-dir",
        str(logs),
    )
    assert (run.returncode, run.stdout) == (1, ""), run.stderr[-3000:]
    assert run.stderr.startswith("lifecycle run: the config has 1 problem(s) for a 2-rank launch; nothing was launched")
    assert run.stderr.count("the distributed optimizer's checkpoints need Apex or Transformer Engine") == 1
    assert not logs.exists()  # no rank started


@pytest.mark.release_independent
def test_a_single_rank_run_whose_provider_hangs_ends_at_the_startup_deadline_with_one_line(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    spec = "tests.integration.hostile_callables:hangs"
    run = lifecycle("run", "--provider", spec, "--set", "startup.timeout_s=3", "--log-dir", str(logs), timeout=120)
    assert run.returncode == 75, run.stderr[-3000:]
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    [line] = [s for s in run.stderr.splitlines() if s.startswith("lifecycle: a startup state did not end")]
    assert "startup.timeout_s = 3 s" in line and line.endswith("or raise startup.timeout_s.")
    records = [json.loads(s) for s in (logs / "rank-00000.jsonl").read_text().splitlines()]
    [timeout] = [r for r in records if r["event"] == "state_timeout"]
    assert (timeout["state"], timeout["trigger"], timeout["timeout_s"]) == ("MODEL_BUILT", "build_model", 3)
