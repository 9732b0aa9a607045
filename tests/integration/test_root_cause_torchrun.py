"""Under torchrun, the rank that dies is the root cause and the ranks the agent stops are victims.

Rank 1 is SIGKILLed inside its provider (MODEL_BUILT's entry work); torchrun's agent then sends
SIGTERM to rank 0. The audit must name rank 1 as the root cause and list rank 0 as a victim.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.release_independent]  # the floor skips it (scripts/test)
ROOT = Path(__file__).resolve().parents[2]

PROVIDER = """
import os
import signal

from lifecycle.core_entry.providers import PROVIDERS


def provider(config, *, pre_process, post_process, vp_stage, inputs):
    if os.environ.get("RANK") == "1":
        os.kill(os.getpid(), signal.SIGKILL)  # dies in build_model, leaving no record of it
    return PROVIDERS["gpt"](config, pre_process=pre_process, post_process=post_process, vp_stage=vp_stage,
                            inputs=inputs)
"""


def test_a_rank_killed_under_torchrun_is_the_root_cause_and_the_stopped_rank_its_victim(tmp_path: Path) -> None:
    (tmp_path / "killer.py").write_text(PROVIDER)
    logs = tmp_path / "logs"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    env["PYTHONPATH"] = str(ROOT)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "lifecycle",
            "run",
            "--nproc",
            "2",
            "--steps",
            "0",
            "--log-dir",
            str(logs),
            "--provider",
            f"{tmp_path / 'killer.py'}:provider",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode != 0, run.stderr[-3000:]
    audit = subprocess.run(
        [sys.executable, "-m", "lifecycle", "audit", str(logs), "--format", "json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(audit.stdout)
    [cause] = report["root_causes"]
    assert cause["rank"] == 1, report["root_causes"]
    assert [v["rank"] for v in cause["victims"]] == [0], report["root_causes"]
    rank0 = [json.loads(line) for line in (logs / "rank-00000.jsonl").read_text().splitlines()]
    assert any(r["event"] in ("startup_aborted", "peer_failed") for r in rank0), [r["event"] for r in rank0]
    text = subprocess.run(
        [sys.executable, "-m", "lifecycle", "audit", str(logs)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    assert "rank 1" in text.split("\n\n")[0] + text[:2000]
