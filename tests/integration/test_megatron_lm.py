"""The one-import change: the example `pretrain_gpt.py`-style script run with Megatron-LM's own
`pretrain` (inside the CPU stand-ins: the rehearsal plus `lifecycle/lm_dropin/entry/_cuda.py`) and
with `lifecycle.lm_dropin.pretrain`, on 2 gloo ranks, DP=2 and TP=2, 5 iterations each.

What a user relies on: the same per-iteration losses (from `train_step`, not the averaged log line),
a startup log that enters every state in order and audits clean, the scheduler slots holding what
Megatron-LM's `train()` binds (bound once: train() binds nothing a second time), the finalizer
called once per step.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

from lifecycle.launchers.local import run_ranks
from lifecycle.testing import leaked
from states import PLAN_TARGETS, STARTUP_ORDER, Plan
from tests.integration import megatron_lm_cases, megatron_lm_runs

pytestmark = pytest.mark.slow
# the states the drop-in's training startup enters: the chain after CONFIGURED, to the training plan's target
STATES = [s.name for s in STARTUP_ORDER[1 : PLAN_TARGETS[Plan.TRAINING].startup_index + 1]]


# (TP, extra arguments, the slots train() would have bound a second time, in its order)
CASES = {
    "dp2": (1, (), ["grad_scale_func"]),
    "tp2": (2, (), ["grad_scale_func"]),
    "dp2-overlap": (1, ("--overlap-grad-reduce",), ["grad_scale_func", "no_sync_func", "grad_sync_func"]),
}


@pytest.fixture(scope="module")
def every_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], Path]:
    """Every case's two runs, Megatron-LM's then the drop-in's, in one pair of rank processes
    (`megatron_lm_runs.runs`: each run from what a new process has; one megatron import per rank)."""
    root = tmp_path_factory.mktemp("runs")
    order = [(case, which, tp, extra) for case, (tp, extra, _) in CASES.items() for which in ("megatron", "lifecycle")]
    return run_ranks(megatron_lm_runs.runs, 2, order, str(root), timeout_s=1200), root


@pytest.fixture(scope="module", params=list(CASES))
def runs(request: pytest.FixtureRequest, every_run: tuple[list[dict[str, Any]], Path]) -> dict[str, Any]:
    ranks, root = every_run
    return {
        "megatron": [out[f"{request.param}-megatron"] for out in ranks],
        "lifecycle": [out[f"{request.param}-lifecycle"] for out in ranks],
        "logs": root / request.param,
        "dropped": CASES[request.param][2],
    }


def records(logs: Path, rank: int) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (logs / f"rank-{rank:05d}.jsonl").read_text().splitlines()]


def test_losses_are_megatron_lms_own_step_for_step(runs: dict[str, Any]) -> None:
    for mine, theirs in zip(runs["lifecycle"], runs["megatron"], strict=True):
        assert len(theirs["losses"]) == 5
        assert mine["losses"] == theirs["losses"]
        assert mine["result"]["losses"] == theirs["losses"]


def test_the_startup_log_enters_every_state_in_order_then_records_each_step(runs: dict[str, Any]) -> None:
    for rank in (0, 1):
        recs = records(runs["logs"], rank)
        dests = [r["dest"] for r in recs if r["event"] == "transition_completed"]
        assert dests == [*STATES, "SHUT_DOWN"]
        assert [r["step"] for r in recs if r["event"] == "step_completed"] == [1, 2, 3, 4, 5]
        assert not [r for r in recs if r["event"] in ("tripwire_violation", "side_effect_refused")]


def test_each_megatron_lm_side_effect_happens_inside_the_transition_that_owns_it(runs: dict[str, Any]) -> None:
    owner = {
        "cuda_device": "init_distributed",
        "process_group": "init_distributed",
        "parallel_state": "init_distributed",
        "rng": "init_distributed",
        "model": "build_model",
        "callbacks": "bind_callbacks",
    }
    recs = records(runs["logs"], 0)
    seen = {r["kind"]: r["trigger"] for r in recs if r["event"] == "side_effect"}
    assert seen == owner


def test_lifecycle_audit_is_clean(runs: dict[str, Any]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lifecycle", "audit", str(runs["logs"])], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "clean" in done.stdout


def test_every_slot_holds_what_megatron_lms_train_binds(runs: dict[str, Any]) -> None:
    for mine, theirs in zip(runs["lifecycle"], runs["megatron"], strict=True):
        assert theirs["slots"]["finalize_model_grads_func"][0] == "finalize_model_grads"
        assert mine["slots"] == theirs["slots"]


def test_train_does_not_bind_a_second_time_and_finalizes_once_per_step(runs: dict[str, Any]) -> None:
    for mine in runs["lifecycle"]:
        assert mine["result"]["second_binding_dropped"] == runs["dropped"]
        assert mine["finalizer_calls"] == [1, 2, 3, 4, 5]


def test_after_pretrain_returns_the_process_group_parallel_state_and_args_are_up_as_under_megatron_lm(
    runs: dict[str, Any],
) -> None:
    for rank, (mine, theirs) in enumerate(zip(runs["lifecycle"], runs["megatron"], strict=True)):
        assert theirs["after"]["initialized"] is True and theirs["after"]["rank"] == rank
        assert mine["after"] == theirs["after"]  # then the script's own destroy_process_group ends them


def test_the_drop_in_creates_only_each_ranks_own_groups_and_every_parallel_state_global_is_megatron_lms(
    runs: dict[str, Any],
) -> None:
    """`distributed.groups: own`, the default: every global of megatron's parallel state (each group by
    its ranks, backend, timeout and description) as Megatron-LM's own creation leaves it."""
    for mine, theirs in zip(runs["lifecycle"], runs["megatron"], strict=True):
        assert mine["after"]["parallel_state"] == theirs["after"]["parallel_state"]
        assert all(name.isdigit() for name in theirs["group_names"])  # torch's counter: every group of the job
        assert mine["group_names"] and not any(name.isdigit() for name in mine["group_names"])  # by their ranks


def test_after_pretrain_returns_the_lifecycle_has_released_its_own_and_handed_over_megatron_lms(
    runs: dict[str, Any],
) -> None:
    for rank, mine in enumerate(runs["lifecycle"]):
        assert mine["own"] == {"threads": [], "rehearsal": False, "cuda_available": False, "wrapped": []}
        recs = records(runs["logs"], rank)
        handed = {r["state"]: r["resources"] for r in recs if r["event"] == "resources_handed_over"}
        assert "process group" in handed["DISTRIBUTED"] and "Megatron-LM args" in handed["SERVICES_READY"]
        assert leaked(recs) == []


def test_a_scripts_own_rewrap_of_the_finalizer_during_train_sees_what_it_sees_under_megatron_lm(
    runs: dict[str, Any],
) -> None:
    for rank, (mine, theirs) in enumerate(zip(runs["lifecycle"], runs["megatron"], strict=True)):
        assert theirs["rewrapped"] == 5  # wrapped in step 1's forward step, before its finalizer ran
        assert mine["rewrapped"] == theirs["rewrapped"]
        replaced = [r for r in records(runs["logs"], rank) if r["event"] == "callback_replaced"]
        assert [(r["slot"], r["was"], r["now"]) for r in replaced] == [
            ("finalize_model_grads_func", "CountingFinalizer", "Counting")
        ]
        assert replaced[0]["writer"] == "tests.integration.megatron_lm_cases:forward_step"


@pytest.fixture(scope="module")
def misordered() -> dict[str, Any]:
    return run_ranks(megatron_lm_cases.misordered, 1, timeout_s=300)[0]


def test_process_groups_created_in_services_ready_are_caught_by_the_tripwires(misordered: dict[str, Any]) -> None:
    case = misordered["groups_in_services"]
    assert case["error"] == "TripwireViolation", case
    assert case["violations"][0] == {
        "target": "torch.distributed.init_process_group",
        "kind": "process_group",
        "trigger": "start_services",
    }
    assert case["entered"] == ["VALIDATED", "FAILED", "SHUT_DOWN"]


def test_seeding_moved_into_model_built_is_caught_by_the_tripwires(misordered: dict[str, Any]) -> None:
    case = misordered["seeds_in_model"]
    assert case["error"] == "TripwireViolation", case
    assert case["violations"][0]["kind"] == "rng" and case["violations"][0]["trigger"] == "build_model"
    assert case["entered"] == ["VALIDATED", "SERVICES_READY", "DISTRIBUTED", "FAILED", "SHUT_DOWN"]
