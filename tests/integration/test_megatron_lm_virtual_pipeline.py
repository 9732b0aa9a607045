"""Virtual pipelines through the drop-in: the example script on 2 gloo ranks, PP=2 with two virtual
stages per rank (4 layers, one per virtual stage), its dataset provider taking `vp_stage` as
Megatron-LM asks. Megatron-LM's own `pretrain`, then the drop-in's, in one pair of rank processes
(`megatron_lm_runs.runs`): the same losses, each virtual stage's data asked for once per run, and a
startup log that enters every state and records each step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

from lifecycle.launchers.local import run_ranks
from tests.integration import megatron_lm_cases, megatron_lm_runs

pytestmark = pytest.mark.slow
VPP = ("--pipeline-model-parallel-size", "2", "--num-layers", "4", "--num-layers-per-virtual-pipeline-stage", "1")


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    root = tmp_path_factory.mktemp("vpp")
    extra = (*VPP, "--train-iters", "3")
    order = [("vpp", "megatron", 1, extra), ("vpp", "lifecycle", 1, extra)]
    hooks = {"vpp": megatron_lm_cases.datasets_per_virtual_stage}
    return root, run_ranks(megatron_lm_runs.runs, 2, order, str(root), hooks, timeout_s=600)


def test_virtual_pipeline_stages_train_with_megatron_lms_own_losses(ran: tuple[Path, list[dict[str, Any]]]) -> None:
    _, ranks = ran
    first, last = (out["vpp-lifecycle"] for out in ranks)
    assert first["losses"] == [None] * 3  # the first stage computes no loss
    assert last["losses"] == pytest.approx(ranks[1]["vpp-megatron"]["losses"], rel=1e-6)
    assert len(last["losses"]) == 3 and all(isinstance(loss, float) for loss in last["losses"])
    assert [out["vpp-lifecycle"]["result"]["iteration"] for out in ranks] == [3, 3]


def test_each_virtual_stage_gets_its_own_data_iterators(ran: tuple[Path, list[dict[str, Any]]]) -> None:
    _, ranks = ran
    for out in ranks:
        assert out["vpp-lifecycle"]["stages_asked"] == out["vpp-megatron"]["stages_asked"] == [0, 1]


def test_the_startup_log_of_each_rank_records_each_step(ran: tuple[Path, list[dict[str, Any]]]) -> None:
    root, _ = ran
    for rank in (0, 1):
        lines = (root / "vpp" / f"rank-{rank:05d}.jsonl").read_text().splitlines()
        steps = [r["step"] for r in map(json.loads, lines) if r["event"] == "step_completed"]
        assert steps == [1, 2, 3], rank
