"""`lifecycle run --nproc 2` owns what it launches: killed even by SIGKILL, torchrun and both ranks
end with it; SIGTERM to it is forwarded, and each rank logs `startup_aborted` and releases (or, blocked
in a collective when the other's abort is broadcast, `peer_failed` naming it)."""

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

from lifecycle.megatron import process_alive
from lifecycle.megatron.compat import at_least

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                            "MASTER_PORT", "TORCHELASTIC_RUN_ID")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _launch(logs: Path, steps: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "lifecycle", "run", "--nproc", "2", "--steps", str(steps),
                             "--log-dir", str(logs)], cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _wait_for(what: Any, launcher: subprocess.Popen[str], limit_s: float = 300) -> None:
    deadline = time.monotonic() + limit_s
    while not what():
        assert launcher.poll() is None, launcher.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the launch never got there"
        time.sleep(0.1)


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def test_a_sigkilled_launcher_takes_torchrun_and_every_rank_with_it(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    launcher = _launch(logs, steps=100_000)
    files = [logs / f"rank-{r:05d}.jsonl" for r in (0, 1)]
    try:
        _wait_for(lambda: all(any(r["event"] == "step_completed" for r in _records(f)) for f in files), launcher)
        ranks = [next(r["pid"] for r in _records(f) if r["event"] == "lifecycle_started") for f in files]
        torchrun = _parent(ranks[0])
        assert torchrun != launcher.pid and _parent(torchrun) == launcher.pid
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        killed = time.monotonic()
        while any(process_alive(p) for p in [torchrun, *ranks]) and time.monotonic() - killed < 60:
            time.sleep(0.1)
        left = [p for p in [torchrun, *ranks] if process_alive(p)]
        print(f"torchrun and both ranks ended {time.monotonic() - killed:.1f} s after the launcher's SIGKILL")
    finally:
        for pid in [*locals().get("ranks", []), locals().get("torchrun", 0)]:
            if pid and process_alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert left == [], "processes outlived the launcher"


@pytest.mark.xfail(not at_least(0, 17), strict=False,
                   reason="open (issue 20): on the floor (megatron-core 0.15.3, torch 2.13) neither rank logged "
                   "startup_aborted for the forwarded SIGTERM in the last runs; not yet diagnosed")
def test_sigterm_to_the_launcher_is_forwarded_and_every_rank_logs_startup_aborted(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    launcher = _launch(logs, steps=0)
    files = [logs / f"rank-{r:05d}.jsonl" for r in (0, 1)]
    try:
        # The rank files are claimed (created empty) at VALIDATED, then written; once each holds a
        # record, megatron's import (seconds) is still ahead and the signal handlers are in place.
        _wait_for(lambda: all(f.exists() and f.stat().st_size > 0 for f in files), launcher)
        launcher.send_signal(signal.SIGTERM)
        _out, err = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 128 + signal.SIGTERM, err[-3000:]
    logs_of = {f.name: _records(f) for f in files}
    aborted = {name: [r["signal"] for r in recs if r["event"] == "startup_aborted"] for name, recs in logs_of.items()}
    assert ["SIGTERM"] in aborted.values(), (aborted, err[-3000:])
    for name, records in logs_of.items():
        # A rank blocked in a collective cannot run its signal handler; when a peer's abort is
        # broadcast first, the watcher ends it with `peer_failed` naming that abort instead.
        victim = [r for r in records if r["event"] == "peer_failed" and "aborted by SIGTERM" in r["error"]]
        assert aborted[name] == ["SIGTERM"] or len(victim) == 1, (name, [r["event"] for r in records])
        assert aborted[name] != ["SIGTERM"] or records[-1]["dest"] == "SHUT_DOWN", (name, records[-1])
