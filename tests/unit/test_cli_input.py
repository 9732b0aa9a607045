"""`lifecycle run` input: bad command-line or config input exits 2 with one line naming the field and
the fix; validation problems before a launch exit 1, printed once; neither imports torch or megatron
(tests/unit's fixture fails any test that does)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lifecycle import RunConfig
from lifecycle.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def lifecycle(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lifecycle", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


def test_a_config_problem_under_nproc_2_is_printed_once_with_exit_1_and_nothing_launched() -> None:
    run = lifecycle("run", "--nproc", "2", "--set", "parallel.tp=3")
    assert run.returncode == 1
    assert run.stderr.count("not divisible by tp·pp·cp = 3·1·1 = 3") == 1
    assert "2-rank launch; nothing was launched" in run.stderr
    assert "model.num_attention_heads=4: not divisible by parallel.tp=3" in run.stderr
    assert "Traceback" not in run.stderr and "ChildFailedError" not in run.stderr


def test_the_launch_world_size_counts_every_node() -> None:
    code = main(
        [
            "run",
            "--nproc",
            "2",
            "--nnodes",
            "2",
            "--rdzv-endpoint",
            "node0:29500",
            "--set",
            "parallel.tp=3",
            "--set",
            "model.num_attention_heads=6",
        ]
    )
    assert code == 1  # 4 ranks are not a multiple of tp=3


def test_intrinsic_validation_imports_neither_torch_nor_megatron() -> None:
    code = (
        "import sys; from lifecycle.config import RunConfig, validate; "
        "p = validate(RunConfig.preset('tiny-gpt', ['parallel.tp=3']), environment=False); "
        "print([x.field for x in p], sorted(m for m in ('torch', 'megatron') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip() == "['model.num_attention_heads'] []", out.stderr


def test_an_lr_written_1e_3_is_a_number_on_the_command_line_and_in_yaml(tmp_path: Path) -> None:
    assert RunConfig.preset("tiny-gpt", ["optimizer.lr=1e-3"]).optimizer.lr == 0.001
    path = tmp_path / "run.yaml"
    path.write_text("optimizer:\n  lr: 1e-3\n  min_lr: 5E-5\n")
    config = RunConfig.from_yaml(str(path), [])
    assert (config.optimizer.lr, config.optimizer.min_lr) == (0.001, 5e-05)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--set", "optimizer.lr=1e-3x"], "optimizer.lr: expected a number such as 0.001 or 1e-3, got '1e-3x'"),
        (["--set", "training.steps=-1"], "training.steps=-1: must not be negative; fix: set training.steps to 0"),
        (["--set", "optimizer.lr=-0.1"], "optimizer.lr=-0.1: must not be negative; fix: set lr >= 0"),
        (["--set", "parallel.tpp=2"], "did you mean 'parallel.tp'"),
        (["--provider", "omni"], "--provider 'omni' is neither a known provider"),
        (["--provider", "missing/file.py:model_provider"], "no file 'missing/file.py'"),
        (["--nproc", "0"], "--nproc 0 must be at least 1"),
        (["--nnodes", "2"], "--nnodes 2 needs a rendezvous every node reaches; add --rdzv-endpoint"),
        (["--nnodes", "two"], "--nnodes 'two' is not a node count"),
        (["--phases", "faults.py:phases"], "--phases 'faults.py:phases' is not package.module:function"),
        (["--phases", "json:phases"], "--phases 'json:phases': json defines no 'phases'"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_field_and_the_fix(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", *args]) == 2
    err = capsys.readouterr().err
    assert expected in err
    assert len([line for line in err.splitlines() if not line.startswith("  - ")]) == 1


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run", "--steps", "-3"], "argument --steps: -3 is negative; write 0 or more"),
        (["run", "--np", "2"], "unrecognized arguments: --np 2"),
        (["run", "--ste", "2"], "unrecognized arguments: --ste 2"),
        (["verify-resume", "--steps", "0"], "argument --steps: 0 is below 1; write 1 or more, e.g. --steps 3"),
        (["verify-resume", "--nproc", "two"], "argument --nproc: 'two' is not an integer; write e.g. --nproc 2"),
    ],
)
def test_bad_command_lines_exit_2_in_one_line(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(args)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and expected in err and len(err.strip().splitlines()) == 1


def test_version_prints_the_project_torch_and_megatron_core_versions(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    wanted = (
        f"lifecycle {version('megatron-lifecycle')} (torch {version('torch')}, "
        f"megatron-core {version('megatron-core')})"
    )
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == wanted


def test_help_says_what_exit_1_and_2_mean_and_offers_only_providers_that_resolve() -> None:
    from lifecycle.core_entry.user_providers import NAMES, load_provider

    run_parser = build_parser()._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    text = " ".join(run_parser.format_help().split())
    assert "1 a problem found by validation" in text and "2 bad command-line or config input" in text
    assert "gpt, copying, gpt-builder, hybrid-builder" in text and "path/to/file.py:function" in text
    assert all(callable(load_provider(name)) for name in NAMES)


def test_verify_resume_refuses_a_keep_directory_that_exists_and_touches_nothing_in_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "mine.txt").write_text("user data")
    assert main(["verify-resume", "--keep", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lifecycle verify-resume: --keep ") and "exists; give a directory that does not exist" in err
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"] and (tmp_path / "mine.txt").read_text() == "user data"
