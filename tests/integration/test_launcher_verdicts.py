"""The verdict on real launches (`lifecycle run --nproc 2`, tiny GPT on gloo, training), each ended by a
real signal: a rank SIGKILLed (the OOM killer's way) is the culprit though torchrun SIGTERMs the other
before its rank watch names it (the launcher's own record says who ended first); the launcher SIGTERMed
is `stopped`, with one `lifecycle run:` line and no torchrun traceback (the launcher SIGKILLed:
test_launcher_owns_children.py). None reads `clean`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lifecycle.audit import audit, judge

pytestmark = [pytest.mark.slow, pytest.mark.release_independent]  # the floor skips it (scripts/test)
ROOT = Path(__file__).resolve().parents[2]


def train_then(logs: Path, fault: str) -> tuple[int | None, str]:
    """Launch 2 ranks, wait for rank 1's third step, then `fault`; the launcher's exit status and stderr."""
    command = ["run", "--preset", "tiny-gpt", "--nproc", "2", "--steps", "100000", "--log-dir", str(logs)]
    run = subprocess.Popen(
        [sys.executable, "-m", "lifecycle", *command],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    rank_1 = logs / "rank-00001.jsonl"
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and run.poll() is None:
            if rank_1.exists() and rank_1.read_text().count('"step_completed"') >= 3:
                break
            time.sleep(0.1)
        assert run.poll() is None, "the launch ended before its third step"
        if fault == "kill rank 1":
            os.kill(json.loads(rank_1.read_text().splitlines()[0])["pid"], signal.SIGKILL)
        else:
            run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    return run.returncode, err


def verdict_of(logs: Path) -> dict[str, Any]:
    deadline = time.monotonic() + 30  # SIGKILLed, the launcher does not wait for its ranks' last records
    doc = judge(audit([str(logs)], jobs=1))
    while doc["outcome"] == "incomplete" and time.monotonic() < deadline:
        time.sleep(0.5)
        doc = judge(audit([str(logs)], jobs=1))
    return doc


def test_a_rank_sigkilled_while_training_is_the_culprit_from_the_launchers_record(tmp_path: Path) -> None:
    code, err = train_then(tmp_path, "kill rank 1")
    assert code == 1, err[-2000:]
    doc = verdict_of(tmp_path)
    assert (doc["outcome"], doc["culprit"]["rank"], doc["class"], doc["action"]) == (
        "failed",
        1,
        "infrastructure",
        "RESTART",
    ), doc
    assert doc["exclude_hosts"] and doc["state"] == "CALLBACKS_BOUND" and doc["victims"] == [0]
    [launch] = [json.loads(line) for line in (tmp_path / "launcher-00000.jsonl").read_text().splitlines()]
    assert launch["ended"][0]["rank"] == 1 and launch["ended"][0]["signal"] == "SIGKILL"


def test_the_launcher_sigtermed_is_stopped_with_one_line_and_no_torchrun_traceback(tmp_path: Path) -> None:
    code, err = train_then(tmp_path, "sigterm launcher")
    assert code == 128 + signal.SIGTERM, err[-2000:]
    lines = [line for line in err.splitlines() if line.startswith("lifecycle run:")]
    assert len(lines) == 1 and "stopped by SIGTERM" in lines[0], err[-2000:]
    assert "Traceback" not in err and "SignalException" not in err and "death signal" not in err, err[-2000:]
    doc = verdict_of(tmp_path)
    assert (doc["outcome"], doc["signal"], doc["action"], doc["exclude_hosts"]) == ("stopped", "SIGTERM", "RESTART", [])
    assert "lifecycle run" in doc["sender"]
