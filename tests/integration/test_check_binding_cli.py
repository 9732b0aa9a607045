"""`lifecycle check-binding` end to end: the model built with the user's provider on 2 CPU ranks,
bound by the named binder, each rank's report printed; the exit status says whether all are ok."""

from __future__ import annotations

import pytest

from tests.child_python import run_lifecycle

pytestmark = pytest.mark.slow


lifecycle = run_lifecycle


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
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("binding check: ok") == 2 and "2 chunks" in done.stdout
    assert done.stdout.count(" ok ") >= 10


def test_megatron_lms_own_binding_on_a_copying_provider_is_ok_where_megatron_training_is_installed() -> None:
    import importlib.util

    done = lifecycle("check-binding", "--provider", "copying", "--binder", "megatron-lm")
    if importlib.util.find_spec("megatron.training") is None:  # megatron-core < 0.17
        assert done.returncode == 2 and done.stdout == ""
        assert "--binder megatron-lm needs megatron.training" in done.stderr
        return
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("binding check: ok") == 2
