"""A script that replaces, before `pretrain`, each name of Megatron-LM's modules that Megatron-LM's
startup looks up when it runs and the drop-in calls too (`lifecycle/lm_dropin/entry/_late.py`), run
with Megatron-LM's own `pretrain` and with the drop-in on 2 gloo ranks, DP=2 and TP=2: every
replacement is called as many times under both, and the replaced `finalize_model_grads` (which
changes the gradients) gives the drop-in Megatron-LM's losses, not the unpatched run's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

from lifecycle.launchers.local import run_ranks
from tests.integration import lm_dropin_late_cases, megatron_lm_runs

pytestmark = pytest.mark.slow

FINALIZER = "megatron.training.training.finalize_model_grads"
RUNS = [
    ("plain", "megatron", 1),
    ("dp2", "megatron", 1),
    ("dp2", "lifecycle", 1),
    ("tp2", "megatron", 2),
    ("tp2", "lifecycle", 2),
]
EVALUATE = ("--split", "98,1,1", "--eval-iters", "1")  # validation and test after training


@pytest.fixture(scope="module")
def every_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], Path]:
    """Each run evaluates after training and saves once at the end (iteration 5, not a multiple of the
    interval): every name the drop-in calls is called."""
    root = tmp_path_factory.mktemp("late")
    save = [("--save", str(root / f"saved-{case}-{which}"), "--save-interval", "1000") for case, which, _ in RUNS]
    order = [(case, which, tp, (*EVALUATE, *saving)) for (case, which, tp), saving in zip(RUNS, save, strict=True)]
    hooks = dict.fromkeys(("dp2", "tp2"), lm_dropin_late_cases.patch_every_late_name)
    return run_ranks(megatron_lm_runs.runs, 2, order, str(root), hooks, timeout_s=1200), root


@pytest.fixture(scope="module", params=["dp2", "tp2"])
def case(request: pytest.FixtureRequest, every_run: tuple[list[dict[str, Any]], Path]) -> dict[str, Any]:
    ranks, root = every_run
    return {
        "megatron": [out[f"{request.param}-megatron"] for out in ranks],
        "lifecycle": [out[f"{request.param}-lifecycle"] for out in ranks],
        "plain": [out["plain-megatron"] for out in ranks],
        "logs": root / request.param,
    }


def test_each_replaced_name_is_called_as_often_as_under_megatron_lms_pretrain(case: dict[str, Any]) -> None:
    for mine, theirs in zip(case["lifecycle"], case["megatron"], strict=True):
        assert theirs["late_calls"][FINALIZER] == 5  # once per step
        assert mine["late_calls"] == theirs["late_calls"]
        never = sorted(name for name, calls in theirs["late_calls"].items() if calls == 0)
        assert never == [  # no --tp-comm-overlap, --batch-invariant-mode or --log-progress
            "megatron.training.initialize._initialize_tp_communicators",
            "megatron.training.initialize.enable_batch_invariant_mode",
            "megatron.training.training.append_to_progress_log",
        ]


def test_the_replaced_finalizer_gives_megatron_lms_losses_not_the_unpatched_ones(case: dict[str, Any]) -> None:
    for mine, theirs, plain in zip(case["lifecycle"], case["megatron"], case["plain"], strict=True):
        assert len(theirs["losses"]) == 5
        assert mine["losses"] == theirs["losses"]
        assert mine["result"]["losses"] == theirs["losses"]
        assert theirs["losses"][1:] != plain["losses"][1:]  # the replacement changes training from step 2


def test_the_slots_hold_what_megatron_lms_train_binds_and_the_log_names_the_replaced_finalizer(
    case: dict[str, Any],
) -> None:
    for rank, (mine, theirs) in enumerate(zip(case["lifecycle"], case["megatron"], strict=True)):
        assert theirs["slots"]["finalize_model_grads_func"][0] == "finalize_model_grads"
        assert mine["slots"] == theirs["slots"]
        assert mine["finalizer_calls"] == [1, 2, 3, 4, 5]  # the lifecycle's count and first-step check still run
        recs = [json.loads(line) for line in (case["logs"] / f"rank-{rank:05d}.jsonl").read_text().splitlines()]
        replaced = [(r["slot"], r["now"], r["writer"]) for r in recs if r["event"] == "callback_replaced"]
        assert replaced[0] == (
            "finalize_model_grads_func",
            "finalize_and_nudge.<locals>.finalize_model_grads",
            "megatron.training.training:train",
        )
        assert not [r for r in recs if r["event"] in ("tripwire_violation", "side_effect_refused")]
