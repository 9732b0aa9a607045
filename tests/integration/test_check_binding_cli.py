"""`lifecycle check-binding` end to end: the model built with the user's provider on 2 CPU ranks,
bound by the named binder, each rank's report printed; the exit status says whether all are ok."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.child_python import run_lifecycle

pytestmark = pytest.mark.slow


lifecycle = run_lifecycle


@pytest.mark.release_independent  # the floor checks this binding in test_check_binding.py, in one process
def test_bridge_0_3_1_as_the_users_binder_on_a_copying_provider_prints_missing_and_exits_1() -> None:
    done = lifecycle("check-binding", "--provider", "copying", "--binder", "tests.integration.foreign_binders:bridge")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    heads = [line for line in lines if line.startswith("rank ")]
    assert [h.split(":")[0] for h in heads] == ["rank 0", "rank 1"]
    assert all("binding check: missing" in h for h in heads)
    finalizer = [line for line in lines if line.strip().startswith("finalize_model_grads_func")]
    assert len(finalizer) == 2
    assert all("missing" in line and "(provider config), which the scheduler never reads" in line for line in finalizer)


def test_the_lifecycle_binder_with_overlap_on_two_chunks_prints_ok_and_exits_0() -> None:
    done = lifecycle(
        "check-binding",
        "--provider",
        "copying",
        "--binder",
        "lifecycle",
        "--set",
        "parallel.pp=2",
        "--set",
        "parallel.vpp=2",
        "--set",
        "model.num_layers=4",
        "--set",
        "ddp.overlap_grad_reduce=true",
        "--settings",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("binding check: ok") == 2 and "2 chunks" in done.stdout
    assert done.stdout.count(" ok ") >= 10
    assert done.stdout.count("settings check: ok (") == 2  # --settings: the comparison, on every rank


def test_a_bridge_style_provider_object_whose_model_lost_a_setting_is_named_and_exits_1() -> None:
    done = lifecycle("check-binding", "--provider", "tests.integration.bridge_style_provider:DROPPING", "--settings")
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout + done.stderr
    assert "hidden_dropout: requested 0.2, found 0.0 on chunk 0's config" in out
    assert "binding check" not in done.stdout  # nothing was bound to a model that is not what was asked


def test_megatron_lms_model_config_and_builder_are_taken_and_one_that_lost_a_setting_exits_1() -> None:
    from tests.integration.settings_cases import has_model_builders

    if not has_model_builders():
        pytest.skip("megatron-core < 0.17 ships no megatron.training.models")
    given = lifecycle("check-binding", "--provider", "tests.integration.megatron_builder_provider:CONFIG", "--settings")
    assert given.returncode == 0, given.stdout + given.stderr
    assert given.stdout.count("settings check: ok (") == 2 and given.stdout.count("binding check: ok") == 2
    lost = lifecycle("check-binding", "--provider", "tests.integration.megatron_builder_provider:DROPPING")
    assert lost.returncode == 1, lost.stdout + lost.stderr
    assert "hidden_dropout: requested 0.2, found 0.0 on chunk 0's config" in lost.stdout + lost.stderr


def test_megatron_lms_own_binding_on_a_copying_provider_is_ok_where_megatron_training_is_installed() -> None:
    import importlib.util

    done = lifecycle("check-binding", "--provider", "copying", "--binder", "megatron-lm")
    if importlib.util.find_spec("megatron.training") is None:  # megatron-core < 0.17
        assert done.returncode == 2 and done.stdout == ""
        assert "--binder megatron-lm needs megatron.training" in done.stderr
        return
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("binding check: ok") == 2


@pytest.mark.release_independent
def test_a_binder_or_provider_that_names_nothing_is_refused_in_one_line_before_any_rank_starts() -> None:
    cases = {
        ("--binder", "tests.integration.hostile_callables:no_such_binder"): (
            "--binder 'tests.integration.hostile_callables:no_such_binder': tests.integration.hostile_callables "
            "defines no 'no_such_binder'; its top-level names: annotations, exits_zero, hangs, os, sys, time"
        ),
        ("--binder", "no_such_package.setup:bind"): (
            "--binder 'no_such_package.setup:bind': no module 'no_such_package.setup' on the path; put its package "
            "on PYTHONPATH or give path/to/file.py:FUNCTION"
        ),
        ("--provider", "tests.integration.hostile_callables:no_such_provider"): (
            "--provider 'tests.integration.hostile_callables:no_such_provider': tests.integration.hostile_callables "
            "defines no 'no_such_provider'; its top-level names: annotations, exits_zero, hangs, os, sys, time"
        ),
    }
    for (flag, spec), line in cases.items():
        done = lifecycle("check-binding", "--provider", "copying", flag, spec)
        assert (done.returncode, done.stdout) == (2, ""), done.stderr
        assert done.stderr == f"lifecycle check-binding: {line}.\n"


@pytest.mark.release_independent
def test_a_provider_that_exits_0_on_import_fails_each_rank_at_once_with_what_it_printed(tmp_path: Path) -> None:
    provider = tmp_path / "quits.py"
    provider.write_text(
        "import os, sys\nprint('licence server unreachable', file=sys.stderr, flush=True)\nos._exit(0)\n"
        "def model_provider(pre_process=True, post_process=True): ...\n"
    )
    done = lifecycle("check-binding", "--provider", f"{provider}:model_provider")
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr.splitlines() == [
        f"lifecycle check-binding: rank {r} failed: exited 0 without a result; it last printed: "
        "licence server unreachable."
        for r in (0, 1)
    ]


@pytest.mark.release_independent
def test_a_hanging_binder_is_ended_at_startup_timeout_s_with_one_line_per_rank_naming_it() -> None:
    spec = "tests.integration.hostile_callables:hangs"
    done = lifecycle("check-binding", "--provider", "copying", "--binder", spec, "--set", "startup.timeout_s=20")
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr.splitlines() == [
        f"lifecycle check-binding: rank {r} failed: binder {spec} did not return within startup.timeout_s = 20 s "
        "in MODEL_BUILT; find what it waits for, or raise startup.timeout_s."
        for r in (0, 1)
    ]


BRIDGE_0_6_2 = Path(__file__).resolve().parents[1] / "fixtures" / "megatron_bridge_0.6.2_training_setup.py.txt"
BRIDGE_0_6_2_RECORD_SHA256 = "-NKuGQONgUdbrzqQrjQSc6g9Iwj4ZZq4G4coFXXQyPE"
"""`megatron/bridge/training/setup.py` in megatron_bridge-0.6.2-py3-none-any.whl's RECORD."""


@pytest.mark.release_independent  # the binder read from Megatron-Bridge's own text, the same on every release
def test_binder_bridge_takes_the_installed_bridge_0_6_2_from_its_text_and_names_the_missing_finalizer(
    tmp_path: Path,
) -> None:
    """Megatron-Bridge 0.6.2 laid out as its wheel installs it, whose package imports fail as they do
    without Transformer Engine: `--binder bridge` runs none of it, only its installer's own text."""
    import subprocess
    import sys

    from tests.child_python import ROOT
    from tests.integration.foreign_binders import record_sha256

    assert record_sha256(BRIDGE_0_6_2) == BRIDGE_0_6_2_RECORD_SHA256
    package = tmp_path / "megatron" / "bridge"
    (package / "training").mkdir(parents=True)
    for init in (package / "__init__.py", package / "training" / "__init__.py"):
        init.write_text("raise ImportError('No module named transformer_engine')\n")
    (package / "training" / "setup.py").write_bytes(BRIDGE_0_6_2.read_bytes())
    done = subprocess.run(
        [sys.executable, "-m", "lifecycle", "check-binding", "--provider", "copying", "--binder", "bridge"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    heads = [line for line in done.stdout.splitlines() if line.startswith("rank ")]
    assert len(heads) == 2 and all("binding check: missing" in h for h in heads)
    finalizer = [line for line in done.stdout.splitlines() if line.strip().startswith("finalize_model_grads_func")]
    assert len(finalizer) == 2 and all("missing" in line and "(provider config)" in line for line in finalizer)
