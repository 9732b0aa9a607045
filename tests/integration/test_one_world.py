"""One world: ranks of two jobs that share a rendezvous endpoint, or ranks launched with
different WORLD_SIZEs, fail at once in DISTRIBUTED, each naming both worlds, instead of waiting
there until `startup.timeout_s` (60 s here). Real processes on one real TCPStore."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lifecycle.audit import audit, verdict
from lifecycle.launchers.local import free_port, start_process
from tests.integration import world_child

# The floor skips it (scripts/test): the worlds are compared by the lifecycle's own check-in keys on
# torch's TCPStore, in DISTRIBUTED before megatron's parallel state; no megatron-core release changes it.
pytestmark = [pytest.mark.slow, pytest.mark.release_independent]

ROOT = Path(__file__).resolve().parents[2]


def launch(tmp: Path, ranks: list[dict[str, str]], *, shared: bool = False) -> list[dict[str, Any]]:
    """Start one child per entry of `ranks` (its RANK, WORLD_SIZE, LIFECYCLE_RUN_ID) on one endpoint,
    each logging to tmp/logs-<i> (`shared`: all to tmp/logs-0); their JSON lines, in the same order."""
    port = str(free_port())
    children = []
    for i, env in enumerate(ranks):
        full = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "LOCAL_RANK": "0", **env}
        log_dir = tmp / f"logs-{0 if shared else i}"
        output = tmp / f"child-{i}.out"
        children.append((start_process(world_child.main, str(log_dir), output=output, environ=full), output))
    outs = []
    for child, output in children:
        child.join(240)
        if child.exitcode is None:
            child.kill()
            child.join()
        assert child.exitcode == 0, output.read_text()[-3000:]
        outs.append(json.loads(output.read_text().strip().splitlines()[-1]))
    return outs


def failed_within(tmp: Path, limit_s: float) -> float:
    """Seconds from the last rank entering DISTRIBUTED to the last rank's failure, from the logs."""
    entered, failed = [], []
    for log in tmp.glob("logs-*/**/rank-*.jsonl"):
        records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        entered += [
            r["ts"]
            for r in records
            if r.get("event") == "transition_started" and r.get("trigger") == "init_distributed"
        ]
        failed += [r["ts"] for r in records if r.get("event") == "transition_failed"]
    assert len(failed) == 2, failed
    waited = max(failed) - max(entered)
    assert waited < limit_s, f"the ranks waited {waited:.1f} s: they were left to the timeout"
    return waited


WORLDS = {
    "two-jobs-one-endpoint": (
        [
            {"RANK": "0", "WORLD_SIZE": "2", "LIFECYCLE_RUN_ID": "job-alpha"},
            {"RANK": "1", "WORLD_SIZE": "2", "LIFECYCLE_RUN_ID": "job-beta"},
        ],
        ["'job-alpha'", "'job-beta'"],
    ),
    "world-sizes-differ": (
        [
            {"RANK": "0", "WORLD_SIZE": "2", "LIFECYCLE_RUN_ID": "job-gamma"},
            {"RANK": "1", "WORLD_SIZE": "3", "LIFECYCLE_RUN_ID": "job-gamma"},
        ],
        ["of 2 ranks", "of 3 ranks"],
    ),
}


@pytest.mark.parametrize(("ranks", "named"), WORLDS.values(), ids=list(WORLDS))
def test_two_worlds_at_one_endpoint_fail_at_once_every_rank_naming_both(
    tmp_path: Path, ranks: list[dict[str, str]], named: list[str]
) -> None:
    for out in launch(tmp_path, ranks):
        assert out["ok"] is False and out["type"] == "DistributedError", out
        assert "two worlds met" in out["error"] and all(name in out["error"] for name in named), out
    failed_within(tmp_path, 30.0)
    result = audit([str(log) for log in tmp_path.glob("logs-*/**/rank-*.jsonl")])
    assert result.root_causes and "two worlds met" in result.root_causes[0].message, result
    doc = verdict(result.root_causes, result.ranks, result.findings)  # what a supervisor reads: STOP
    assert (doc["class"], doc["action"], doc["state"], doc["phase"]) == (
        "config",
        "STOP",
        "SERVICES_READY",
        "init_distributed",
    )
    assert doc["culprit"]["host"] == socket.gethostname()


def test_a_supervisor_following_the_logs_gets_a_stop_verdict_as_the_worlds_fail(tmp_path: Path) -> None:
    """`lifecycle audit --format verdict --follow` started before the ranks: it writes the verdict once the
    first failure is known, long before its idle timeout (120 s) or the ranks' startup.timeout_s (60 s)."""
    verdict_file = tmp_path / "verdict.json"
    (tmp_path / "logs-0").mkdir()
    command = [sys.executable, "-m", "lifecycle", "audit", "--format", "verdict", "--follow", str(tmp_path / "logs-0")]
    follower = subprocess.Popen(
        [*command, "--output", str(verdict_file), "--idle-timeout", "120"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    ranks = [
        {"RANK": "0", "WORLD_SIZE": "2", "LIFECYCLE_RUN_ID": "job-delta"},
        {"RANK": "1", "WORLD_SIZE": "3", "LIFECYCLE_RUN_ID": "job-delta"},
    ]
    launch(tmp_path, ranks, shared=True)
    stdout, _ = follower.communicate(timeout=180)
    waited = failed_within(tmp_path, 30.0)
    doc = json.loads(verdict_file.read_text())
    assert follower.returncode == 1 and json.loads(stdout.splitlines()[-1]) == doc
    assert (doc["verdict"], doc["outcome"], doc["class"], doc["action"]) == (1, "failed", "config", "STOP")
    assert doc["state"] == "SERVICES_READY" and doc["phase"] == "init_distributed" and "two worlds met" in doc["reason"]
    last_failure = max(
        json.loads(line)["ts"]
        for log in (tmp_path / "logs-0").glob("rank-*.jsonl")
        for line in log.read_text().splitlines()
        if '"transition_failed"' in line
    )
    late = verdict_file.stat().st_mtime - last_failure
    assert late < 30.0, f"the verdict came {late:.1f} s after the last failure (ranks waited {waited:.1f} s)"
