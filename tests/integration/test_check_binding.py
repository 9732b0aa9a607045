"""`bindings.check` and the first-step guard on bindings made by others, on 2 gloo ranks.

- Megatron-Bridge 0.3.1's own `_update_model_config_funcs` (vendored verbatim, see
  foreign_binders.py) on a provider that deep-copies its config: the finalizer is `missing` on the
  scheduler's config, the report names the provider's config that holds it, the guard raises on
  step 1.
- Megatron-LM's `train()` binding block on the same provider: `ok`, and the guard counts training
  steps only, and catches a loop that finalizes twice.
- Every slot-table configuration bound by `bind_callbacks` is `ok`; each slot corrupted alone is
  `wrong`, and only that slot.
- A rebuild on the same config without a rebind leaves a `stale` binding.
"""

from __future__ import annotations

from typing import Any

import pytest

from lifecycle.launchers.local import run_ranks
from tests.integration import check_cases, foreign_binders
from tests.integration.test_slot_table import TABLE

pytestmark = pytest.mark.slow

BRIDGE_SLOTS = {
    "finalize_model_grads_func": "missing",
    "grad_scale_func": "missing",
    "no_sync_func": "ok",
    "grad_sync_func": "ok",
    "param_sync_func": "ok",
}


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    cases = [(label, ddp, chunks) for label, (ddp, chunks, _) in TABLE.items()]
    return run_ranks(check_cases.run_all, 2, cases, timeout_s=900)


def test_the_vendored_bridge_file_is_the_one_megatron_bridge_0_3_1_ships() -> None:
    path = foreign_binders.BRIDGE_SETUP
    assert foreign_binders.record_sha256(path) == foreign_binders.BRIDGE_RECORD_SHA256
    assert "Licensed under the Apache License, Version 2.0" in path.read_text()


def test_bridge_0_3_1_binding_on_a_copying_provider_is_missing_and_names_the_provider_config(
    ranks: list[dict[str, Any]],
) -> None:
    for rank in ranks:
        case = rank["bridge"]
        assert case["verdict"] == "missing"
        assert case["verdicts"] == BRIDGE_SLOTS
        assert case["provider_id"] != case["scheduler_id"]
        where = case["elsewhere"]["finalize_model_grads_func"]
        assert len(where) == 1 and case["provider_id"] in where[0] and "provider config" in where[0]
        error = case["error"]
        assert error["type"] == "BindingError" and error["slot"] == "finalize_model_grads_func"
        for text in (case["provider_id"], case["scheduler_id"], "get_model_config(model[0])"):
            assert text in error["message"]


def test_the_first_step_guard_raises_on_step_one_of_the_bridge_binding(
    ranks: list[dict[str, Any]],
) -> None:
    for rank in ranks:
        guard = rank["bridge"]["guard"]
        assert guard["error"]["calls"] == 0 and guard["error"]["step"] == 1
        assert guard["done"] == []
        assert "finalizer_calls=0" in guard["error"]["message"]
        assert guard["step_restored"] and guard["finalizer_restored"]


def test_megatron_lm_train_binding_on_the_same_provider_is_ok(ranks: list[dict[str, Any]]) -> None:
    for rank in ranks:
        case = rank["megatron_lm"]
        assert case["verdict"] == "ok", case["text"]
        assert set(case["verdicts"].values()) == {"ok"}
        assert case["error"] is None


def test_the_guard_skips_forward_only_steps_and_catches_a_step_that_finalizes_twice(
    ranks: list[dict[str, Any]],
) -> None:
    for rank in ranks:
        guard = rank["megatron_lm"]["guard"]
        assert guard["done"] == ["train", "eval", "train"]
        assert guard["error"]["calls"] == 2 and guard["error"]["step"] == 3
        assert guard["step_restored"] and guard["finalizer_restored"] and not guard["armed"]


@pytest.mark.parametrize("label", list(TABLE))
def test_every_slot_table_configuration_bound_by_bind_callbacks_is_ok(ranks: list[dict[str, Any]], label: str) -> None:
    for rank in ranks:
        for kind in ("report", "strict"):
            report = rank["table"][label][kind]
            assert report["verdict"] == "ok", report["text"]
            assert report["error"] is None


@pytest.mark.parametrize("label", list(TABLE))
def test_each_slot_corrupted_alone_is_wrong_naming_that_slot(ranks: list[dict[str, Any]], label: str) -> None:
    chunks = TABLE[label][1]
    for rank in ranks:
        corrupted = rank["table"][label]["corrupted"]
        expected = set(check_cases.SLOTS)
        if chunks == 2:
            expected |= {"no_sync_func reordered", "grad_sync_func reordered"}
        assert set(corrupted) == expected
        assert set(corrupted.values()) == {"wrong"}, corrupted


def test_a_rebuild_without_a_rebind_leaves_a_stale_binding(ranks: list[dict[str, Any]]) -> None:
    for rank in ranks:
        case = rank["stale"]
        assert case["verdict"] == "stale"
        assert case["verdicts"] == {
            "finalize_model_grads_func": "ok",
            "grad_scale_func": "stale",
            "no_sync_func": "stale",
            "grad_sync_func": "stale",
            "param_sync_func": "ok",
        }
        assert "rebind after the rebuild" in case["error"]["message"]
        assert case["old_model_ok"] == "ok"


def test_a_guarded_forward_step_checks_megatron_lm_and_refuses_the_bridge_binding_at_once(
    ranks: list[dict[str, Any]],
) -> None:
    for rank in ranks:
        ok = rank["megatron_lm"]["forward_guard"]
        assert ok["error"] is None and ok["events"] == [("first_step_finalized", 1)]
        assert not ok["armed"] and ok["step_restored"]
        refused = rank["bridge"]["forward_guard"]
        assert refused["error"]["type"] == "BindingError" and refused["error"]["slot"] == "grad_scale_func"
        assert refused["events"] == []
