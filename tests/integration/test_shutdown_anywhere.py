"""A lifecycle whose thread has ended is shut down from another thread, or at interpreter exit when
nobody did: process group, parallel state and the CPU rehearsal's patches are all released, and the
log ends with `lifecycle_shutdown`. Ctrl-C during `lifecycle run`'s shutdown finishes the release and
exits 130 with one line. Real megatron-core on CPU, in subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import atexit, sys, threading

def released():
    import torch.distributed as dist
    from megatron.core import parallel_state
    from lifecycle.core_entry.rehearsal import is_active
    return (dist.is_initialized(), parallel_state.model_parallel_is_initialized(), is_active())

atexit.register(lambda: print("at exit:", released(), flush=True))  # runs after the lifecycle's own
from lifecycle import Lifecycle, RunConfig
from states import State

def on_a_thread(log_dir):
    held = []
    def start():
        lc = Lifecycle(RunConfig.preset("tiny-gpt", ["logging.log_dir=" + log_dir]), provider="gpt")
        lc.advance_to(State.CALLBACKS_BOUND)
        held.append(lc)
    worker = threading.Thread(target=start)
    worker.start()
    worker.join()
    return held[0]

first = on_a_thread(sys.argv[1])
print("open:", released(), flush=True)
first.shutdown()  # from the main thread: the rehearsal's thread has ended
print("shut down from another thread:", released(), first.state.name, flush=True)
second = on_a_thread(sys.argv[2])  # left open: interpreter exit shuts it down
"""

INTERRUPTING_PHASES = """
import os
import signal

from lifecycle.core_entry import MegatronPhases
from states import State


def release_after_ctrl_c(ctx, release):
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C arrives while the shutdown releases
    return release(ctx)


def phases():
    return MegatronPhases().around(State.CALLBACKS_BOUND, release=release_after_ctrl_c)
"""


def _env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")
    }
    env["PYTHONPATH"] = str(ROOT)
    return env


def _events(path: Path) -> list[str]:
    """The lifecycle's own events (library `warning` records can fall anywhere, also in a shutdown)."""
    return [e for e in (json.loads(line)["event"] for line in path.read_text().splitlines()) if e != "warning"]


def _audit(logs: Path) -> Any:
    out = subprocess.run(
        [sys.executable, "-m", "lifecycle", "audit", str(logs), "--format", "json"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return {f["rule"] for f in json.loads(out.stdout)["findings"]}


@pytest.mark.release_independent  # the engine's threads and exit hook; the floor's releases: test_restart
def test_a_lifecycle_whose_thread_ended_is_released_from_another_thread_and_at_exit(tmp_path: Path) -> None:
    (tmp_path / "script.py").write_text(SCRIPT)
    first, second = tmp_path / "first", tmp_path / "second"
    run = subprocess.run(
        [sys.executable, str(tmp_path / "script.py"), str(first), str(second)],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [line for line in run.stdout.splitlines() if ":" in line]
    assert lines == [
        "open: (True, True, True)",
        "shut down from another thread: (False, False, False) SHUT_DOWN",
        "at exit: (False, False, False)",
    ], run.stdout + run.stderr[-3000:]
    for logs in (first, second):
        assert _events(logs / "rank-00000.jsonl")[-2:] == ["lifecycle_shutdown", "transition_completed"]
        assert "LA021" not in _audit(logs)


@pytest.mark.release_independent  # the CLI's signal handling during a shutdown
def test_ctrl_c_during_the_shutdown_of_lifecycle_run_finishes_it_and_exits_130_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "interrupting.py").write_text(INTERRUPTING_PHASES)
    logs = tmp_path / "logs"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "lifecycle",
            "run",
            "--steps",
            "1",
            "--log-dir",
            str(logs),
            "--phases",
            "interrupting:phases",
        ],
        cwd=ROOT,
        env={**_env(), "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 130, run.stderr[-3000:]
    lines = [line for line in run.stderr.splitlines() if line.startswith("lifecycle run:")]
    assert lines == [
        "lifecycle run: rank 0: startup aborted by SIGINT in state SHUT_DOWN during shutdown; "
        "everything was released (exit 130)."
    ], run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    events = _events(logs / "rank-00000.jsonl")
    assert events[-2:] == ["lifecycle_shutdown", "transition_completed"] and "transition_failed" not in events
