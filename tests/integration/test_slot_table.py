"""The five scheduler slots in 13 configurations, against what Megatron-LM `core_v0.16.1` sets.

The expected values are read from Megatron-LM's `megatron/training/training.py` `train()` (the
block after "Setup some training config params") after `arguments.py` has normalized the
arguments (no virtual pipeline: `align_param_gather` forced off), and written down here as data:

- `finalize_model_grads_func`: megatron's `finalize_model_grads`; `grad_scale_func`: the
  optimizer's `scale_loss`;
- with `overlap_grad_reduce` on a DDP model: `no_sync_func` = each chunk's `no_sync`, and with
  `align_grad_reduce` `grad_sync_func` = each chunk's `start_grad_sync`;
- with `overlap_param_gather` and `align_param_gather`: `param_sync_func` = each chunk's
  `start_param_sync`;
- a sync slot holds the single callable for one chunk, a list with one entry per chunk for several.

One chunk is DP=2 (pp=1); two chunks are pp=2 with vpp=2 on the 2 ranks. docs/bindings.md has the
same table with the Megatron-LM reference for each row.
"""

from __future__ import annotations

from typing import Any

import pytest

from lifecycle.launchers.local import run_ranks
from tests.integration import slot_cases

pytestmark = pytest.mark.slow

FIN, SCALE = "finalize_model_grads", "scale_loss"
NO_SYNC_1, NO_SYNC_2 = ("no_sync", "callable"), ("no_sync", 2)
GRAD_1, GRAD_2 = ("start_grad_sync", "callable"), ("start_grad_sync", 2)
PARAM_2 = ("start_param_sync", 2)

OGR = {"overlap_grad_reduce": True}
NO_ALIGN_GRAD = {"overlap_grad_reduce": True, "align_grad_reduce": False}
DIST = {"use_distributed_optimizer": True}
DIST_OGR = {**DIST, **OGR}
OPG = {**DIST_OGR, "overlap_param_gather": True, "align_param_gather": False}
OPG_ALIGN = {**DIST_OGR, "overlap_param_gather": True, "align_param_gather": True}

# label: (ddp settings, chunks, expected slots in SLOTS order: finalize, grad_scale, no_sync,
# grad_sync, param_sync)
TABLE: dict[str, tuple[dict[str, Any], int, tuple[Any, ...]]] = {
    "plain-1": ({}, 1, (FIN, SCALE, None, None, None)),
    "plain-2": ({}, 2, (FIN, SCALE, None, None, None)),
    "ogr-1": (OGR, 1, (FIN, SCALE, NO_SYNC_1, GRAD_1, None)),
    "ogr-2": (OGR, 2, (FIN, SCALE, NO_SYNC_2, GRAD_2, None)),
    "ogr-no-align-1": (NO_ALIGN_GRAD, 1, (FIN, SCALE, NO_SYNC_1, None, None)),
    "ogr-no-align-2": (NO_ALIGN_GRAD, 2, (FIN, SCALE, NO_SYNC_2, None, None)),
    "distopt-1": (DIST, 1, (FIN, SCALE, None, None, None)),
    "distopt-ogr-1": (DIST_OGR, 1, (FIN, SCALE, NO_SYNC_1, GRAD_1, None)),
    "distopt-ogr-2": (DIST_OGR, 2, (FIN, SCALE, NO_SYNC_2, GRAD_2, None)),
    "opg-1": (OPG, 1, (FIN, SCALE, NO_SYNC_1, GRAD_1, None)),
    "opg-2": (OPG, 2, (FIN, SCALE, NO_SYNC_2, GRAD_2, None)),
    # one chunk: arguments.py turns align_param_gather off, so train() binds no param_sync_func
    "opg-align-1": (OPG_ALIGN, 1, (FIN, SCALE, NO_SYNC_1, GRAD_1, None)),
    "opg-align-2": (OPG_ALIGN, 2, (FIN, SCALE, NO_SYNC_2, GRAD_2, PARAM_2)),
}


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    cases = [(label, ddp, chunks) for label, (ddp, chunks, _) in TABLE.items()]
    return run_ranks(slot_cases.run_all, 2, cases, timeout_s=600)


def test_the_table_covers_thirteen_configurations() -> None:
    assert len(TABLE) == 13


@pytest.mark.parametrize("label", list(TABLE))
def test_each_slot_holds_what_megatron_lm_train_sets(ranks: list[dict[str, Any]], label: str) -> None:
    expected = dict(zip(slot_cases.SLOTS, TABLE[label][2], strict=True))
    for rank in ranks:
        assert rank[label]["slots"] == expected


@pytest.mark.parametrize("label", list(TABLE))
def test_each_configuration_finalizes_its_step_once_and_unbinds_every_slot(
    ranks: list[dict[str, Any]], label: str
) -> None:
    for rank in ranks:
        assert rank[label]["finalizer_calls"] == 1
        assert rank[label]["cleared"]


def test_unbinding_clears_the_lists_the_interleaved_schedule_made_from_our_callables(
    ranks: list[dict[str, Any]],
) -> None:
    for rank in ranks:
        case = rank["interleaved_one_chunk"]
        assert case["schedule"] == "forward_backward_pipelining_with_interleaving"
        assert case["after_step"]["grad_sync_func"] == "list"  # megatron rewrote our callable
        assert set(case["unbound"]) == {
            "finalize_model_grads_func",
            "grad_scale_func",
            "no_sync_func",
            "grad_sync_func",
        }
        assert case["left"] == dict.fromkeys(slot_cases.SLOTS)
