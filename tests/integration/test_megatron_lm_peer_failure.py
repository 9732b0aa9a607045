"""A rank that fails during the drop-in's training is named on every rank: the drop-in's DISTRIBUTED
starts the lifecycle's rank watch on Megatron-LM's process-group store, and each `train_step` runs
under its failure broadcast. Rank 1's forward step raises at step 3 of 5 (2 gloo ranks, DP=2); rank
0, left in that step's collectives, stops waiting for it, logs `peer_failed` naming rank 1, and the
audit names rank 1 as the root cause and rank 0 as its victim. The watch's state deadline
(`startup.timeout_s`) is Megatron-LM's `--distributed-timeout-minutes`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

from lifecycle.errors import RankFailed
from lifecycle.launchers.local import run_ranks
from lifecycle.testing import leaked
from tests.integration import megatron_lm_cases

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def records(logs: Path, rank: int) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (logs / f"rank-{rank:05d}.jsonl").read_text().splitlines()]


def test_a_rank_failing_in_a_drop_in_train_step_is_named_on_every_rank_and_by_the_audit(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    try:
        outcome: object = run_ranks(megatron_lm_cases.run_with_fault, 2, str(logs), 3, timeout_s=400)
    except RankFailed as failed:  # rank 0's watcher may end it (exit 75) while it waits in a collective
        outcome = failed.context.get("errors")
    one = records(logs, 1)
    [failed] = [r for r in one if r["event"] == "transition_completed" and r["dest"] == "FAILED"]
    assert failed["reason"] == "RuntimeError: injected fault on rank 1 at step 3", failed
    zero = records(logs, 0)
    validated = next(r for r in zero if r["event"] == "config_validated")
    assert validated["config"]["startup"]["timeout_s"] == 120  # the watch's deadline: Megatron-LM's own
    peers = [r for r in zero if r["event"] == "peer_failed"]
    assert peers and {r["peer_rank"] for r in peers} == {1}, ([r["event"] for r in zero], outcome)
    assert "injected fault on rank 1" in peers[0]["error"]
    assert [r["step"] for r in zero if r["event"] == "step_completed"] == [1, 2]
    for rank in (0, 1):  # train()'s frames let go of the model before the releases' checks
        alive = leaked(records(logs, rank))
        assert alive == [], (rank, alive)
    audit = subprocess.run(
        [sys.executable, "-m", "lifecycle", "audit", str(logs), "--format", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    [cause] = json.loads(audit.stdout)["root_causes"]
    assert cause["rank"] == 1, cause
    assert [v["rank"] for v in cause["victims"]] == [0], cause
