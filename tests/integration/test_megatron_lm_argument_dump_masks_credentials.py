"""Megatron-LM's argument dump (`validate_args` prints every argument on rank 0), where the drop-in
runs it, masks credentials as the startup log does: a person's terminal and a job's stdout file
never show a password or a token."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SECRET = "hunter2secret"
TOKEN = "hf_" + "A1b2C3d4E5f6G7h8J9k0"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _dump(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "-- arguments --" in line)
    end = next(i for i, line in enumerate(lines) if "-- end of arguments --" in line)
    return lines[start + 1 : end]


def test_lifecycle_run_with_a_megatron_config_prints_the_argument_dump_without_the_password(tmp_path: Path) -> None:
    config = tmp_path / "megatron.yaml"
    url = f"https://ann:{SECRET}@wandb.example.com/exp"
    subprocess.run(
        [sys.executable, str(ROOT / "tests/integration/megatron_lm_yaml.py"), str(config), "--wandb-exp-name", url],
        check=True,
        capture_output=True,
        env=_env(),
        timeout=200,
    )
    assert SECRET in config.read_text()  # the file holds it: only what is printed is masked
    logs = str(tmp_path / "logs")
    done = subprocess.run(
        [sys.executable, "-m", "lifecycle", "run", "--megatron-config", str(config), "--steps", "0", "--log-dir", logs],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert SECRET not in done.stdout + done.stderr
    dump = _dump(done.stdout)
    assert "  wandb_exp_name .................................. https://<redacted>@wandb.example.com/exp" in dump
    assert "  num_layers ...................................... 2" in dump  # the rest as Megatron-LM prints it


def test_the_dump_masks_a_scripts_secret_named_argument_and_leaves_numbers_and_flags(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import pretrain_gpt_tiny as script
    finally:
        sys.path.remove(str(ROOT / "examples"))
    import megatron.training.arguments as arguments
    from megatron.training.arguments import parse_args, validate_args

    from lifecycle.lm_dropin.entry import masked_dump

    def extra(parser):  # type: ignore[no-untyped-def]  # a script's own arguments, as Megatron-LM takes them
        parser.add_argument("--hf-token", type=str)
        parser.add_argument("--data-url", type=str)
        return parser

    argv = [*script.TINY_GPT, "--hf-token", TOKEN, "--data-url", f"s3://bucket/x?X-Amz-Signature={SECRET}&k=v"]
    monkeypatch.setattr(sys, "argv", ["pretrain_gpt_tiny.py", *argv])
    args = parse_args(extra)
    original = arguments._print_args
    with masked_dump():
        validate_args(args)
    assert arguments._print_args is original  # put back for the next caller
    dump = _dump(capsys.readouterr().out)
    assert TOKEN not in "\n".join(dump) and SECRET not in "\n".join(dump)
    assert "  hf_token ........................................ <redacted>" in dump
    assert "  data_url ........................................ s3://bucket/x?X-Amz-Signature=<redacted>&k=v" in dump
    assert "  calculate_per_token_loss ........................ False" in dump  # a flag named token is no secret
    assert "  hidden_size ..................................... 64" in dump
    assert args.hf_token == TOKEN  # the arguments themselves are the script's, unchanged
