"""The whole startup on real megatron-core (CPU rehearsal, gloo): 1 and 2 ranks, every plan,
the copying provider, TP=2, PP=2, vpp=2 chunks, rebuild and restart. Nothing of Megatron is mocked.

All 2-rank cases share one pair of spawned processes (megatron's import costs ~7 s a process).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest

from lifecycle.launchers.local import run_ranks
from lifecycle.testing import check_log, read_log
from tests.integration.real_cases import run_cases

pytestmark = pytest.mark.slow

TWO_RANK_CASES = [
    ("dp2", "training", (), {"steps": 2}),
    ("tp2", "training", ("parallel.tp=2",), {}),
    ("pp2", "training", ("parallel.pp=2",), {}),
    ("vpp2", "training", ("parallel.pp=2", "parallel.vpp=2", "model.num_layers=4"), {}),
    ("copying", "training", (), {"provider": "copying"}),
    ("rebuild-copying", "rebuild", ("copying",), {}),
    ("rebuild-gpt", "rebuild", ("gpt",), {}),
    ("inference", "plan", ("inference",), {}),
    ("convert", "plan", ("convert",), {}),
    ("rl", "rl", (), {}),
    ("restart", "restart", (), {}),
    ("drift", "drift", (), {}),
    ("restart-gpt", "restart-rebinds", ("gpt",), {}),
    ("restart-copying", "restart-rebinds", ("copying",), {}),
]


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    root = tmp_path_factory.mktemp("real2")
    os.environ["LIFECYCLE_TEST_ROOT"] = str(root)
    try:
        return run_ranks(run_cases, 2, TWO_RANK_CASES, timeout_s=1200)
    finally:
        del os.environ["LIFECYCLE_TEST_ROOT"]


@pytest.fixture(scope="module")
def one(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("real1")
    os.environ["LIFECYCLE_TEST_ROOT"] = str(root)
    try:
        [result] = run_ranks(run_cases, 1, [("dp1", "training", (), {"steps": 2})], timeout_s=600)
        return result  # type: ignore[no-any-return]
    finally:
        del os.environ["LIFECYCLE_TEST_ROOT"]


def case(results: list[dict[str, Any]], label: str) -> list[dict[str, Any]]:
    out = [r[label] for r in results]
    for rank, r in enumerate(out):
        assert "error" not in r, f"rank {rank}: {r.get('traceback', r)}"
    return out


def assert_clean_log(path: str) -> None:
    assert check_log(read_log(Path(path))) == []


def test_single_rank_training_reaches_callbacks_bound_and_finalizes_each_step(one) -> None:
    r = one["dp1"]
    assert "error" not in r, r.get("traceback")
    assert r["state"] == "CALLBACKS_BOUND" and r["world_size"] == 1 and r["optimizer"]
    assert [calls for _, calls in r["steps"]] == [1, None]
    assert r["finalizer"] == 2
    # an untrained model predicts uniformly: the first reported loss is the full per-token loss, ln(vocab)
    assert abs(r["steps"][0][0] - math.log(r["vocab_size"])) < 0.5
    assert_clean_log(r["log"])


def test_two_rank_data_parallel_training_binds_to_the_scheduler_config(two) -> None:
    for rank, r in enumerate(case(two, "dp2")):
        assert r["world_size"] == 2 and r["chunks"] == 1
        b = r["binding"]
        assert b["target_id"] == b["scheduler_config_id"] and not b["copied"]
        assert "finalize_model_grads_func" in b["slots"] and "grad_scale_func" in b["slots"]
        assert r["finalizer"] == 2 and r["steps"][0][1] == 1
        assert all(loss is not None and loss > 0 for loss, _ in r["steps"])
        assert_clean_log(r["log"])
        assert Path(r["log"]).name == f"rank-{rank:05d}.jsonl"


def test_tensor_parallel_two_runs_a_step(two) -> None:
    for r in case(two, "tp2"):
        assert r["finalizer"] == 1 and r["binding"]["target_id"] == r["binding"]["scheduler_config_id"]


def test_pipeline_parallel_two_runs_1f1b_and_each_stage_finalizes_once(two) -> None:
    results = case(two, "pp2")
    assert sorted(r["pipeline_ranks"] for r in results) == [(0, 2), (1, 2)]
    for r in results:
        assert r["finalizer"] == 1
    last = next(r for r in results if r["pipeline_ranks"][0] == 1)
    assert last["steps"][0][0] is not None


def test_virtual_pipeline_builds_two_chunks_and_binds_one_entry_per_chunk(two) -> None:
    for r in case(two, "vpp2"):
        assert r["chunks"] == 2 and r["binding"]["chunks"] == 2 and r["finalizer"] == 1


def test_copying_provider_is_bound_on_the_models_copy_and_finalizes(two) -> None:
    for r in case(two, "copying"):
        b = r["binding"]
        assert b["copied"] and b["target_id"] == b["scheduler_config_id"] != b["provider_config_id"]
        assert r["finalizer"] == 1


@pytest.mark.parametrize("label", ["rebuild-copying", "rebuild-gpt"])
def test_rebuild_rebinds_to_the_new_model_and_releases_the_old_one(two, label: str) -> None:
    for r in case(two, label):
        assert not r["same_config"]
        assert r["second"]["target_id"] == r["second"]["scheduler_config_id"]
        assert r["second"]["copied"] is (label == "rebuild-copying")
        assert r["old_model_released"]
        assert r["steps"][0][1] == 1


def test_inference_plan_stops_at_model_built_without_optimizer_or_callbacks(two) -> None:
    for r in case(two, "inference"):
        assert r["state"] == "MODEL_BUILT" and not r["optimizer"] and r["binding"] is None
        assert r["beyond"] == "GuardRejected" and r["dist_initialized"] and not r["dist_after_shutdown"]


def test_convert_plan_starts_services_without_distributed(two) -> None:
    for r in case(two, "convert"):
        assert r["state"] == "SERVICES_READY" and not r["dist_initialized"] and r["vocab_size"]
        assert r["beyond"] == "GuardRejected"


def test_rl_plan_refuses_a_second_initialization(two) -> None:
    for r in case(two, "rl"):
        assert r["restart"] == "GuardRejected"
        assert r["second_init"][0] == "DistributedError"
        assert "already initialized" in r["second_init"][1]
        assert r["first_state"] == "CALLBACKS_BOUND"


def test_restart_after_failure_starts_a_new_generation_that_trains(two) -> None:
    for r in case(two, "restart"):
        assert r["generation"] == 1 and r["steps"][0][1] == 1


def test_a_change_to_the_models_transformer_config_after_build_is_detected_with_its_field(two) -> None:
    for r in case(two, "drift"):
        assert r["mutated"] == ("transformer_config.hidden_dropout", 0.0, 0.5)
        assert r["state"] == "FAILED"


@pytest.mark.parametrize("label", ["restart-gpt", "restart-copying"])
def test_restart_rebinds_to_the_new_generations_model(two, label: str) -> None:
    for r in case(two, label):
        assert r["generation"] == 1 and r["steps"][0][1] == 1
        assert r["second"]["target_id"] == r["second"]["scheduler_config_id"] and not r["same_config"]
        assert r["second"]["copied"] is (label == "restart-copying")
        assert_clean_log(r["log"])
