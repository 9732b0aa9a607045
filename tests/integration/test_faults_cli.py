"""`lifecycle run` when it is stopped or pointed at someone else's logs: SIGTERM during startup
prints one line and exits 143 with `startup_aborted` in the log; a log directory of another run is
refused (exit 1) unless `--overwrite`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.release_independent]  # the floor skips it (scripts/test)
ROOT = Path(__file__).resolve().parents[2]
ENV = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}


def test_sigterm_during_startup_prints_one_line_logs_startup_aborted_and_exits_143(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    run = subprocess.Popen(
        [sys.executable, "-m", "lifecycle", "run", "--preset", "tiny-gpt", "--steps", "0", "--log-dir", str(logs)],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        # The rank file appears at VALIDATED; megatron's import (seconds) is still ahead then.
        while not (logs / "rank-00000.jsonl").exists() and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.02)
        run.send_signal(signal.SIGTERM)
        _out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 128 + signal.SIGTERM, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("lifecycle run:")]
    assert len(lines) == 1 and "aborted by SIGTERM" in lines[0] and "Traceback" not in err, err[-3000:]
    records = [json.loads(x) for x in (logs / "rank-00000.jsonl").read_text().splitlines()]
    aborted = [r for r in records if r["event"] == "startup_aborted"]
    assert len(aborted) == 1 and aborted[0]["signal"] == "SIGTERM"
    assert records[-1]["event"] == "transition_completed" and records[-1]["dest"] == "SHUT_DOWN"
    audit = subprocess.run(
        [sys.executable, "-m", "lifecycle", "audit", str(logs), "--format", "json"],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    rules = {f["rule"] for f in json.loads(audit.stdout)["findings"]}
    assert "LA010" not in rules, "an abort is not a crash"


def test_a_log_dir_of_another_run_is_refused_and_overwrite_replaces_it(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank-00000.jsonl").write_text(json.dumps({"event": "lifecycle_started", "run_id": "older-run"}) + "\n")
    base = [
        sys.executable,
        "-m",
        "lifecycle",
        "run",
        "--preset",
        "tiny-gpt",
        "--plan",
        "convert",
        "--steps",
        "0",
        "--log-dir",
        str(logs),
    ]
    refused = subprocess.run(base, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 1, refused.stderr[-2000:]
    assert "'older-run'" in refused.stderr and "--overwrite" in refused.stderr
    assert "older-run" in (logs / "rank-00000.jsonl").read_text()
    replaced = subprocess.run([*base, "--overwrite"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert replaced.returncode == 0, replaced.stderr[-2000:]
    assert "older-run" not in (logs / "rank-00000.jsonl").read_text()
