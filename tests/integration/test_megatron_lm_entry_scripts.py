"""Megatron-LM's own entry script, one import changed, behaves exactly as under Megatron-LM.

`pretrain_gpt.py` at core_v0.19.0 (tests/fixtures, with Megatron-LM's LICENSE; changed only by one
added import line, `from lifecycle.lm_dropin import pretrain`) runs as `__main__` with its own
command line: tiny sizes, mock data, the null tokenizer, Megatron-LM's default `--num-workers` (2
data loader workers with pinned memory), on 2 gloo ranks with DP=2, with TP=2 and with PP=2. Each runs twice
in the same CPU emulation: as Megatron-LM ships it (the import line taken out; Megatron-LM's
`pretrain` inside the CPU stand-ins) and as vendored (the drop-in). All six runs share one pair of
rank processes (`megatron_lm_script_cases.runs`), the drop-in's DP=2 run first.

(`pretrain_mamba.py` at this tag only runs `pretrain_hybrid.py`, whose `HybridStack` builds its
final norm with Transformer Engine whatever the spec: it does not run on the CPU wheel.)
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
from tests.integration import megatron_lm_script_cases

pytestmark = pytest.mark.slow
LAYOUTS = megatron_lm_script_cases.LAYOUTS
ORDER = [(which, layout) for layout in LAYOUTS for which in ("lifecycle", "megatron")]
# the states the drop-in's training startup enters: the chain after CONFIGURED, to the training plan's target
STATES = [s.name for s in STARTUP_ORDER[1 : PLAN_TARGETS[Plan.TRAINING].startup_index + 1]]


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("scripts")
    ranks = run_ranks(megatron_lm_script_cases.runs, 2, ORDER, str(root / "modules"), str(root), timeout_s=600)
    return {"ranks": ranks, "logs": root}


def pairs(scripts: dict[str, Any]) -> list[tuple[int, str, dict[str, Any], dict[str, Any]]]:
    """(rank, layout, the drop-in's run, Megatron-LM's run) for every rank and layout."""
    return [
        (r, layout, out[f"lifecycle-{layout}"], out[f"megatron-{layout}"])
        for r, out in enumerate(scripts["ranks"])
        for layout in LAYOUTS
    ]


def records(scripts: dict[str, Any], layout: str, rank: int) -> list[dict[str, Any]]:
    path = scripts["logs"] / f"lifecycle-{layout}" / f"rank-{rank:05d}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_losses_and_grad_norms_are_megatron_lms_bit_for_bit_for_five_iterations(scripts: dict[str, Any]) -> None:
    for rank, layout, mine, theirs in pairs(scripts):
        first_stage = layout == "pp2" and rank == 0  # the loss is the last pipeline stage's
        assert len(theirs["losses"]) == 5 and None not in theirs["grad_norms"]
        assert (set(theirs["losses"]) == {None}) if first_stage else (None not in theirs["losses"])
        assert mine["losses"] == theirs["losses"]
        assert mine["grad_norms"] == theirs["grad_norms"]


def test_the_finalizer_is_called_as_often_each_step_and_a_script_rewrap_sees_every_call(
    scripts: dict[str, Any],
) -> None:
    for _, _, mine, theirs in pairs(scripts):
        assert theirs["finalizer_calls"] == [1, 1, 1, 1, 1] and theirs["rewrapped"] == 5
        assert mine["finalizer_calls"] == theirs["finalizer_calls"]
        assert mine["rewrapped"] == theirs["rewrapped"]


def test_after_pretrain_returns_the_same_is_up_as_under_megatron_lm(scripts: dict[str, Any]) -> None:
    for rank, layout, mine, theirs in pairs(scripts):
        tp, pp = LAYOUTS[layout]
        assert theirs["after"]["initialized"] is True and theirs["after"]["rank"] == rank
        assert (theirs["after"]["tp"], theirs["after"]["pp"], theirs["after"]["dp"]) == (tp, pp, 2 // (tp * pp))
        assert mine["after"] == theirs["after"]
        assert mine["own"] == {"threads": [], "rehearsal": False, "cuda_available": False, "wrapped": []}


def test_the_drop_ins_log_enters_every_state_records_each_step_and_audits_clean(scripts: dict[str, Any]) -> None:
    for layout in LAYOUTS:
        for rank in (0, 1):
            recs = records(scripts, layout, rank)
            assert [r["dest"] for r in recs if r["event"] == "transition_completed"] == [*STATES, "SHUT_DOWN"]
            assert [r["step"] for r in recs if r["event"] == "step_completed"] == [1, 2, 3, 4, 5]
            assert not [r for r in recs if r["event"] == "tripwire_violation"] and leaked(recs) == []
        done = subprocess.run(
            [sys.executable, "-m", "lifecycle", "audit", str(Path(scripts["logs"]) / f"lifecycle-{layout}")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0 and "clean" in done.stdout, done.stdout + done.stderr
