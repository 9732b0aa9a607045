"""In-process restart with a rank really lost (SIGKILLed mid-training, two real processes): by
default the job stays whole (the survivor ends in `restarts_exhausted`, one line naming why); with
an explicit `min_world_size=1` the survivor trains on alone, and its log and the audit say so (LA025)."""

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
from lifecycle.testing import installed_problem

PROBLEM = installed_problem()
if PROBLEM is not None:
    pytest.skip(PROBLEM, allow_module_level=True)

CHILD = Path(__file__).with_name("lost_rank_child.py")


def lose_rank_1(root: Path, min_world_size: str) -> dict[str, Any]:
    """Both ranks under the restart wrapper; rank 1 SIGKILLs itself at step 2 of cycle 0."""
    master, wrapper = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(CHILD.parents[2]), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
    env.update(MASTER_PORT=str(master), TORCH_CPP_LOG_LEVEL="ERROR", OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen(
            [sys.executable, str(CHILD), str(root), min_world_size, str(wrapper)],
            env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for rank in range(2)
    ]
    try:
        outputs = [p.communicate(timeout=240)[0].decode(errors="replace") for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    result = json.loads((root / "rank0.json").read_text()) if (root / "rank0.json").exists() else {}
    logs = root / "logs" / "rank-00000.jsonl"
    records = [json.loads(line) for line in logs.read_bytes().splitlines()] if logs.exists() else []
    return {
        "codes": [p.returncode for p in procs],
        "rank0": result,
        "output": outputs[0][-3000:],
        "log": logs,
        "records": records,
    }


@pytest.fixture(scope="module")
def lost(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("lost")
    return {case: lose_rank_1(root / case, case) for case in ("default", "1")}


def test_by_default_a_lost_rank_ends_the_job_whole_with_one_line_naming_why(lost: dict[str, dict[str, Any]]) -> None:
    case = lost["default"]
    assert case["codes"] == [0, -9], case["output"]
    error = case["rank0"]["error"]
    assert error.startswith("in-process restart gave up: fewer than min_world_size=2 ranks are left"), error
    [end] = [r for r in case["records"] if r["event"] == "restarts_exhausted"]
    assert (end["reason"], end["min_world_size"]) == ("min_world_size", 2)
    assert [r["world_size"] for r in case["records"] if r["event"] == "cycle_started"] == [2]


def test_an_explicit_min_world_size_trains_on_smaller_and_the_audit_says_so(lost: dict[str, dict[str, Any]]) -> None:
    case = lost["1"]
    assert case["codes"] == [0, -9], case["output"]
    last = case["rank0"]["cycles"] - 1
    assert case["rank0"]["world_sizes"] == [1] and case["rank0"]["cycle"] == last >= 1
    started = [
        (r["cycle"], r["world_size"], r["launched_world_size"])
        for r in case["records"]
        if r["event"] == "cycle_started"
    ]
    assert started[0] == (0, 2, 2) and started[-1] == (last, 1, 2)
    found = [f.message for f in audit([str(case["log"])], jobs=1).findings if f.rule == "LA025"]
    assert found and found[0].startswith(f"cycle {last} trained with 1 of the 2 ranks launched"), found
