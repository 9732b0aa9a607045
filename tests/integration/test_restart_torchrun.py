"""A process restart: rank 1 is SIGKILLed at step 3 of 6 (after a checkpoint at step 2) under
`torchrun --max-restarts 1`; the new processes resume from step 2 and end with the losses and
weights of an uninterrupted run, and the audit joins both process attempts of the run id."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lifecycle.audit import audit
from lifecycle.launchers.local import free_port
from lifecycle.testing import attempts

CHILD = Path(__file__).with_name("restart_torchrun_child.py")
pytestmark = pytest.mark.release_independent  # torchrun's restart; checkpoints per release: test_checkpoints.py


def torchrun(root: Path, name: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(CHILD.parents[2]), "TORCH_CPP_LOG_LEVEL": "ERROR"}
    # --monitor-interval 3: the agent notices the killed rank after the survivor's watcher has (its
    # pid check, 0.5 s, and 1 s grace): the survivor's log then names the rank that died
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--max-restarts",
        "1",
        "--monitor-interval",
        "3",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{free_port()}",
        "--rdzv-id",
        name,
        str(CHILD),
        str(root),
        name,
        *extra,
    ]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("torchrun")
    out: dict[str, Any] = {}
    for name, extra in (("plain", ()), ("killed", ("--fault",))):
        done = torchrun(root, name, *extra)
        assert done.returncode == 0, done.stderr[-4000:]
        out[name] = [json.loads((root / name / f"out-{rank}.json").read_text()) for rank in (0, 1)]
    out["root"] = root
    return out


def test_a_sigkill_under_torchrun_max_restarts_resumes_from_the_checkpoint(runs: dict[str, Any]) -> None:
    for rank in (0, 1):
        plain, killed = runs["plain"][rank], runs["killed"][rank]
        assert (plain["attempt"], plain["start"]) == (0, 0)
        assert (killed["attempt"], killed["start"]) == (1, 2), rank  # new processes, resumed from step 2
        assert [tuple(x) for x in killed["losses"]] == [tuple(x) for x in plain["losses"][2:]], rank
        assert killed["weights"] == plain["weights"], rank


def test_the_audit_joins_the_attempts_of_one_run_id(runs: dict[str, Any]) -> None:
    result = audit([str(runs["root"] / "killed" / "logs")], jobs=1)
    found = attempts(result.ranks)
    assert [(a.attempt, a.ranks, a.ended) for a in found] == [(0, (0, 1), True), (1, (0, 1), False)]
    assert found[0].cause_rank == 1  # killed at step 3: rank 0's `peer_failed` names it
    assert len({r.run_id for r in result.ranks}) == 1
