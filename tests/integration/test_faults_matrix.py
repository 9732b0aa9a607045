"""The fault matrix on real megatron-core: each state's entry work × {exception, a full log disk,
SIGTERM, SIGINT} → the state, the records, everything released, and `torch.manual_seed` working
afterwards; `restart()` reaches CALLBACKS_BOUND where the failure allows it.

Real processes and real signals: each test runs one child process (tests/integration/fault_child.py)
through all its scenarios, so megatron is imported once per child. The log disk is a small tmpfs
where this machine lets us mount one (root), else the log writer's writes are made to fail.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from states import STARTUP_ORDER, forward_trigger

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parents[2]
STATES = [s.name for s in STARTUP_ORDER[1:]]
TRIGGER = {s.name: forward_trigger(s).value for s in STARTUP_ORDER[1:]}
CLEAN = {"dist": False, "parallel": False, "rehearsal": False, "manual_seed": "ok"}


@pytest.fixture(scope="module")
def disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str | None]:
    """A 2 MiB tmpfs for the logs, or None when it cannot be mounted here."""
    where = tmp_path_factory.mktemp("tmpfs")
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)], capture_output=True, check=False
        ).returncode
        == 0
    )
    yield str(where) if mounted else None
    if mounted:
        subprocess.run(["umount", str(where)], check=False)


def run_child(scenarios: list[dict[str, Any]], send: int | None = None) -> tuple[list[dict[str, Any]], int, str]:
    """Run the child over `scenarios`, sending it `send` each time it says READY. Its stderr (the
    logs' fallback JSON lines among them) is drained on a thread: a full pipe would block the child."""
    import threading

    child = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.fault_child", orjson.dumps(scenarios)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stderr is not None
    err: list[str] = []
    drain = threading.Thread(target=lambda: err.extend(child.stderr), daemon=True)  # type: ignore[arg-type]
    drain.start()
    results = []
    try:
        for line in child.stdout:
            if line.startswith("READY") and send is not None:
                os.kill(child.pid, send)
            elif line.startswith("RESULT "):
                results.append(orjson.loads(line[len("RESULT ") :]))
        code = child.wait(timeout=600)
    finally:
        if child.poll() is None:
            child.kill()
    drain.join(timeout=30)
    return results, code, "".join(err)


def scenarios(kind: str, tmp: Path, disk: str | None) -> list[dict[str, Any]]:
    base = Path(disk) if disk and kind == "oserror" else tmp
    return [{"kind": kind, "state": state, "log_dir": str(base / f"{kind}-{state}"), "disk": disk} for state in STATES]


@pytest.fixture(scope="module")
def failing(
    tmp_path_factory: pytest.TempPathFactory, disk: str | None
) -> dict[str, tuple[list[dict[str, Any]], int, str]]:
    """The exception and the full log disk scenarios, run by one child (one megatron import): each
    kind's results, with the child's exit code and stderr."""
    tmp = tmp_path_factory.mktemp("failing")
    results, code, err = run_child(scenarios("exception", tmp, None) + scenarios("oserror", tmp, disk))
    return {
        kind: ([r for r in results if r["scenario"]["kind"] == kind], code, err) for kind in ("exception", "oserror")
    }


def test_an_exception_in_each_states_entry_work_fails_releases_and_restarts(
    failing: dict[str, tuple[list[dict[str, Any]], int, str]],
) -> None:
    results, code, err = failing["exception"]
    assert code == 0 and len(results) == len(STATES), err[-3000:]
    for out in results:
        state = out["scenario"]["state"]
        assert out["state"] == "FAILED" and "injected" in out["error"], out
        failed = [e for e in out["events"] if e[0] == "transition_failed"]
        assert failed[0][1] == TRIGGER[state], out
        assert out["in_failed"]["manual_seed"] == "ok", out
        if state == "VALIDATED":
            assert out["restart"].startswith("GuardRejected") and "new Lifecycle" in out["restart"]
            assert "create a new Lifecycle" in out["error"]
        else:
            assert out["restart"] == "CALLBACKS_BOUND", out
        assert out["after_shutdown"] == CLEAN, out
        assert Path(out["scenario"]["log_dir"], "rank-00000.jsonl").exists(), "the failure left a record"


def test_a_log_disk_that_fills_in_each_states_entry_work_fails_the_lifecycle_and_shutdown_releases(
    failing: dict[str, tuple[list[dict[str, Any]], int, str]],
) -> None:
    results, code, err = failing["oserror"]
    assert code == 0 and len(results) == len(STATES), err[-3000:]
    for out in results:
        assert out["state"] == "FAILED", out
        if out["scenario"]["state"] == "VALIDATED":  # the directory's lock is the first file the run writes
            assert "No space left on device" in out["error"] and ".lifecycle.lock" in out["error"], out
        else:
            assert "No space left on device" in out["log_fault"] and "cannot be written" in out["error"], out
        assert out["file_ends_whole"], "a record cut short by the full disk is cut off again"
        assert out["in_failed"]["manual_seed"] == "ok", out
        assert out["after_shutdown"] == CLEAN, out
    assert '"event":"log_write_failed"' in err, "the fault itself went to stderr as a JSON line"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_each_states_entry_work_logs_startup_aborted_releases_and_exits_128_plus_n(
    tmp_path: Path, sig: signal.Signals
) -> None:
    cases = scenarios("signal", tmp_path, None)
    cases.append({"kind": "between", "state": "DISTRIBUTED", "log_dir": str(tmp_path / "between")})
    cases.append({"kind": "signal", "state": "MODEL_BUILT", "log_dir": str(tmp_path / "last"), "uncaught": True})
    results, code, err = run_child(cases, send=sig)
    assert code == 128 + sig, err[-3000:]
    assert len(results) == len(STATES) + 1, err[-3000:]
    for out in results:
        assert out["exit_code"] == 128 + sig and out["state"] == "SHUT_DOWN", out
        aborted = [e for e in out["events"] if e[0] == "startup_aborted"]
        assert len(aborted) == 1 and aborted[0][2] == sig.name, out
        assert not [e for e in out["events"] if e[0] == "transition_failed"], "stopped, not failed"
        assert out["after_shutdown"] == CLEAN, out
    last = [orjson.loads(line) for line in (tmp_path / "last" / "rank-00000.jsonl").read_bytes().splitlines()]
    aborted = next(r for r in last if r["event"] == "startup_aborted")
    assert (aborted["signal"], aborted["state"], aborted["trigger"]) == (sig.name, "DISTRIBUTED", "build_model")
    assert last[-1]["event"] == "transition_completed" and last[-1]["dest"] == "SHUT_DOWN"


@pytest.mark.release_independent
def test_a_two_rank_run_whose_log_disk_fills_mid_run_ends_with_both_ranks_exited_and_released(
    disk: str | None, tmp_path: Path
) -> None:
    from lifecycle.launchers.local import run_ranks
    from tests.integration.fault_child import two_rank_disk_full

    if disk is None:
        pytest.skip("a tmpfs cannot be mounted here (needs root); the 1-rank matrix injects the writer's failure")
    results = run_ranks(two_rank_disk_full, 2, disk, timeout_s=300)
    for rank, out in enumerate(results):
        assert out["rank"] == rank and out["state"] == "FAILED", out
        assert "No space left on device" in out["log_fault"] and "cannot be written" in out["error"], out
        assert out["released"] == CLEAN, out
        threads = out["threads"]
        assert threads["refused"] and "RehearsalError" in threads["refused"][0], threads
        assert "nothing was released" in threads["refused"][0], threads
        assert threads["state_after_refusal"] == "CALLBACKS_BOUND" and threads["rehearsal_after_refusal"], threads
        assert threads["state"] == "SHUT_DOWN" and threads["released"] == CLEAN, threads
