"""Megatron-LM parity at the edges, on real megatron-core over 2 gloo ranks:

vpp=1 normalized to no virtual pipeline; the distributed optimizer with overlapped param gather
runs step 1 with the gather deferred and syncs parameters after the last step (replicas equal,
losses unchanged); the step API for hand-written loops runs the same bookkeeping as
`train_steps`. One spawned pair of ranks runs every case (`parity_cases.run_all`).
"""

from __future__ import annotations

from typing import Any

import pytest

from lifecycle.launchers.local import run_ranks
from tests.integration import parity_cases

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    return run_ranks(parity_cases.run_all, 2, timeout_s=600)


def _names(records: list[dict[str, Any]]) -> list[str]:
    return [r["event"] for r in records]


def test_pp2_with_vpp1_is_normalized_to_no_virtual_pipeline_and_logged(ranks: list[dict[str, Any]]) -> None:
    for rank in ranks:
        case = rank["vpp_one"]
        [record] = case["normalized"]
        assert (record["field"], record["given"], record["used"]) == ("parallel.vpp", 1, None)
        assert "Megatron-LM" in record["why"]
        assert case["runtime_vpp"] is None and case["chunks"] == 1


def test_pp2_with_vpp1_trains_three_steps_with_single_callable_slots(ranks: list[dict[str, Any]]) -> None:
    for rank in ranks:
        case = rank["vpp_one"]
        assert case["steps"] == [(1, 1), (2, None), (3, None)]
        assert case["bound"]["no_sync_func"] == "callable"
        assert case["bound"]["grad_sync_func"] == "callable"


def test_rebuild_after_pp2_vpp1_training_leaves_every_slot_empty(ranks: list[dict[str, Any]]) -> None:
    for rank in ranks:
        case = rank["vpp_one"]
        assert case["state"] == "DISTRIBUTED"
        assert case["after_rebuild"] == dict.fromkeys(parity_cases.SLOTS)


@pytest.mark.parametrize("layout", ["vpp2", "dp2"])
def test_after_train_steps_every_data_parallel_replica_holds_the_same_parameters(
    ranks: list[dict[str, Any]], layout: str
) -> None:
    for rank in ranks:
        for mode in ("deferred", "gather_from_step_one"):
            case = rank[f"{layout}_{mode}"]
            assert case["spread"] == 0.0
            assert case["records"][-1]["event"] == "params_synced"
            assert case["records"][-1]["reason"] == "after_last_step"


@pytest.mark.parametrize("layout", ["vpp2", "dp2"])
def test_deferring_the_first_gather_does_not_change_the_losses_from_fresh_weights(
    ranks: list[dict[str, Any]], layout: str
) -> None:
    for rank in ranks:
        deferred, eager = rank[f"{layout}_deferred"], rank[f"{layout}_gather_from_step_one"]
        assert deferred["losses"] == eager["losses"]
        assert deferred["finalizer_calls"] == [1, None, None]
    last_stage = ranks[-1][f"{layout}_deferred"]["losses"]
    assert all(isinstance(loss, float) for loss in last_stage)


def test_step_one_defers_the_gather_and_resumes_it_with_param_sync_func_restored(
    ranks: list[dict[str, Any]],
) -> None:
    for rank in ranks:
        case = rank["vpp2_deferred"]
        deferred, resumed, synced = case["records"]
        assert (deferred["event"], deferred["step"], deferred["param_sync_func"]) == ("param_gather_deferred", 1, True)
        assert (resumed["event"], resumed["step"]) == ("param_gather_resumed", 1)
        assert synced["event"] == "params_synced"
        assert case["param_sync"] == 2 and case["param_sync_restored"]
        assert case["hooks"] == [True, True]
        assert "param_gather_deferred" not in _names(rank["vpp2_gather_from_step_one"]["records"])


def test_align_param_gather_without_virtual_pipeline_is_normalized_off(ranks: list[dict[str, Any]]) -> None:
    for rank in ranks:
        case = rank["dp2_deferred"]
        [record] = [r for r in case["records"] if r["event"] == "config_normalized"]
        assert (record["field"], record["given"], record["used"]) == ("ddp.align_param_gather", True, False)
        assert case["param_sync"] is None


def test_a_hand_written_loop_with_the_step_api_finalizes_and_logs_each_step(ranks: list[dict[str, Any]]) -> None:
    for rank in ranks:
        case = rank["hand_loop"]
        assert case["results"] == [(1, 1), (2, None), (3, None)]
        assert _names(case["records"]) == [
            "param_gather_deferred",
            "first_step_finalized",
            "param_gather_resumed",
            "step_completed",
            "step_completed",
            "step_completed",
            "params_synced",
        ]
        assert [r["step"] for r in case["records"] if r["event"] == "step_completed"] == [1, 2, 3]


def test_replicas_differ_after_a_hand_written_loop_until_params_are_synced(ranks: list[dict[str, Any]]) -> None:
    for rank in ranks:
        case = rank["hand_loop"]
        assert case["spread_before_sync"] > 0.0  # the stale shards the issue describes
        assert case["synced"] is True
        assert case["spread_after_sync"] == 0.0


def test_the_step_api_watchdog_raises_when_the_step_ran_without_the_binding(ranks: list[dict[str, Any]]) -> None:
    own = []
    for rank in ranks:
        case = rank["unbound_loop"]
        # Both ranks raise; the second to fail may first hear (failure broadcast, which covers the
        # steps) that its peer did, and names the peer's FinalizerNotCalled instead.
        assert case["error"] in ("FinalizerNotCalled", "DistributedError"), case
        assert _names(case["records"]) == ["first_step_not_finalized"]
        own.append(case["error"] == "FinalizerNotCalled")
    assert any(own), "the first rank to fail names its own FinalizerNotCalled"


def test_a_first_step_that_raises_restores_the_gather_and_the_next_step_is_the_first(
    ranks: list[dict[str, Any]],
) -> None:
    for rank in ranks:
        case = rank["failing_first_step"]
        # its own error, or its peer's, heard through the failure broadcast first
        assert case["error"] == "checkpoint load failed" or (
            "checkpoint load failed" in case["error"] and "The root cause is on rank" in case["error"]
        ), case
        assert case["hooks"] == [True, True] and case["param_sync_restored"]
        assert case["records"][:2] == ["param_gather_deferred", "param_gather_resumed"]
        assert case["records"][2:] == [
            "param_gather_deferred",
            "first_step_finalized",
            "param_gather_resumed",
            "step_completed",
            "step_completed",
        ]
        assert case["retry"] == [1, None]


def test_the_step_bookkeeping_does_not_keep_a_rebuilt_model_alive(ranks: list[dict[str, Any]]) -> None:
    for rank in ranks:
        assert rank["failing_first_step"]["old_freed"]
