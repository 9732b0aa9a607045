"""`lifecycle run --megatron-config FILE`: a Megatron-LM YAML config (`PretrainConfigContainer.to_yaml`)
is the run's one source of truth; the RunConfig the startup log records is derived from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_lifecycle_run_takes_a_megatron_lm_yaml_config(tmp_path: Path) -> None:
    config = tmp_path / "megatron.yaml"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests/integration/megatron_lm_yaml.py"),
            str(config),
            "--num-layers",
            "3",
            "--hidden-size",
            "96",
        ],
        check=True,
        capture_output=True,
        env=_env(),
        timeout=200,
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "lifecycle",
            "run",
            "--megatron-config",
            str(config),
            "--steps",
            "1",
            "--log-dir",
            str(tmp_path / "logs"),
        ],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "✓ CALLBACKS_BOUND" in done.stdout and "step 1/1" in done.stdout
    first = [json.loads(x) for x in (tmp_path / "logs" / "rank-00000.jsonl").read_text().splitlines()]
    validated = next(r for r in first if r["event"] == "config_validated")
    model = validated["config"]["model"]
    assert (model["num_layers"], model["hidden_size"], model["seq_length"]) == (3, 96, 32)
    assert validated["config"]["training"]["micro_batch_size"] == 2


def test_a_file_that_is_not_a_megatron_lm_config_is_refused_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {num_layers: 2}\n")
    done = subprocess.run(
        [sys.executable, "-m", "lifecycle", "run", "--megatron-config", str(bad)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=200,
    )
    assert done.returncode == 2
    assert "--megatron-config" in done.stderr and str(bad) in done.stderr
