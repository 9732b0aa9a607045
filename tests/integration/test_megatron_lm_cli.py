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
            "--set",
            "training.seed=7",
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
    assert validated["config"]["training"]["seed"] == 7
    overridden = f"lifecycle run: --set training.seed=7 overrides training.seed = 1234 from --megatron-config {config}."
    assert f"{overridden}\n" in done.stderr


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


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lifecycle", "run", *args], capture_output=True, text=True, env=_env(), timeout=200
    )


CONTAINER = "_target_: megatron.training.config.container.PretrainConfigContainer\n"


def test_a_target_outside_megatrons_config_classes_is_refused_before_anything_of_the_file_runs(
    tmp_path: Path,
) -> None:
    written = tmp_path / "written-while-loading"
    config = tmp_path / "megatron.yaml"
    config.write_text(
        CONTAINER + "model:\n  _target_: megatron.training.models.gpt.GPTModelConfig\n  transformer:\n"
        "    autocast_dtype:\n      _target_: torch.save\n      _args_: [{}, " + json.dumps(str(written)) + "]\n"
    )
    done = _run("--megatron-config", str(config))
    assert (done.returncode, done.stdout) == (2, ""), done.stderr[-3000:]
    assert done.stderr == (
        f"lifecycle run: --megatron-config {config}: model.transformer.autocast_dtype: _target_ 'torch.save' is not "
        "one of megatron's config classes, and loading it would run it; remove it, or pass --allow-targets to let "
        "Megatron-LM's own allowlist decide.\n"
    )
    assert not written.exists()


def test_a_file_of_many_aliases_or_of_more_than_a_megabyte_is_refused_in_one_line(tmp_path: Path) -> None:
    aliases = tmp_path / "aliases.yaml"
    aliases.write_text(CONTAINER + "x: &x [1, 2]\ny: [" + ", ".join(["*x"] * 100) + "]\n")
    levels = "a0: &a0 [1]\n" + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 12)}]\n" for i in range(1, 6))
    bomb = tmp_path / "bomb.yaml"  # 60 aliases, 12**5 values once expanded
    bomb.write_text(CONTAINER + levels)
    big = tmp_path / "big.yaml"
    big.write_text(CONTAINER + "# " + "x" * (1 << 20) + "\n")
    for path, why in (
        (aliases, "has more than 64 YAML aliases; write the values out"),
        (bomb, "expands to more than 200000 values (YAML aliases); write the values out"),
        (big, f"{big.stat().st_size} bytes, more than a config's 1048576; give the config, not data"),
    ):
        done = _run("--megatron-config", str(path))
        assert (done.returncode, done.stderr) == (2, f"lifecycle run: --megatron-config {path}: {why}.\n")


def test_a_missing_megatron_config_is_reported_before_megatron_is_imported(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    code = (
        "import json, sys\nfrom lifecycle.cli import main\ncode = main(['run', '--megatron-config', sys.argv[1]])\n"
        "print(json.dumps([code, sorted(m for m in ('torch', 'megatron') if m in sys.modules)]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(missing)], capture_output=True, text=True, env=_env(), timeout=200
    )
    assert json.loads(done.stdout.splitlines()[-1]) == [2, []], done.stderr[-3000:]
    assert done.stderr == (
        f"lifecycle run: --megatron-config {missing}: no such file; give the YAML Megatron-LM's to_yaml wrote.\n"
    )
