"""No process `run_ranks` started outlives it, however it ends: not a process a rank forked (after the
call returns), not a rank stuck in native code with a SIGTERM handler, the fork server or
multiprocessing's resource tracker (after the owner, or the server, is SIGKILLed); a rank that can
release still gets SIGTERM first. Real processes, a real futex wait, real signals."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lifecycle.errors import RankFailed
from lifecycle.launchers.local import run_ranks

ROOT = Path(__file__).resolve().parents[2]
GONE_WITHIN_S = 60.0
"""A bound on waiting, not a timing: the processes go in a few seconds, or never."""


def _wait_in_a_futex(*, holding_the_gil: bool) -> None:
    """Lock a default mutex twice: a futex wait that no signal ends (it restarts after a handler)."""
    libc = ctypes.PyDLL(None) if holding_the_gil else ctypes.CDLL(None)
    mutex = ctypes.create_string_buffer(64)  # zeroed: PTHREAD_MUTEX_INITIALIZER
    libc.pthread_mutex_lock(mutex)
    libc.pthread_mutex_lock(mutex)


def _rank_zero_forks_a_child_stuck_in_a_futex(out: str) -> str:
    if os.environ["RANK"] == "0":
        child = os.fork()
        if child == 0:
            _wait_in_a_futex(holding_the_gil=False)
            os._exit(0)
        (Path(out) / "child").write_text(str(child))
    return "done"


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _left_after(pids: list[int], within_s: float) -> list[int]:
    end = time.monotonic() + within_s
    while (left := [p for p in pids if _running(p)]) and time.monotonic() < end:
        time.sleep(0.1)
    return left


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_process_a_rank_forked_is_gone_after_run_ranks_returns(tmp_path: Path) -> None:
    assert run_ranks(_rank_zero_forks_a_child_stuck_in_a_futex, 2, str(tmp_path), timeout_s=600) == ["done"] * 2
    child = int((tmp_path / "child").read_text())
    left = _left_after([child], GONE_WITHIN_S)
    _kill(left)
    assert not left, f"the process rank 0 forked ({child}) outlived run_ranks"


def _rank_zero_sticks_rank_one_releases(out: str) -> None:
    """Both catch SIGTERM at Python level, as a lifecycle does. Rank 0 sticks in a futex wait holding
    the GIL: its handler never runs, nor any other Python thread. Rank 1 sleeps: its handler runs,
    writes "released" and exits."""
    rank = os.environ["RANK"]

    def release(*_: object) -> None:
        (Path(out) / f"released-{rank}").write_text("")
        sys.exit(143)

    signal.signal(signal.SIGTERM, release)
    (Path(out) / f"rank-{rank}").write_text(str(os.getpid()))
    if rank == "0":
        _wait_in_a_futex(holding_the_gil=True)
    time.sleep(3600)


OWNER = """
import sys
from lifecycle.errors import RankFailed
from lifecycle.launchers.local import run_ranks
from tests.unit.test_ranks_leave_no_process_behind import _rank_zero_sticks_rank_one_releases as ranks
run_ranks(ranks, 2, sys.argv[1], timeout_s=3600)
"""


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _children(pid: int) -> list[int]:
    found = []
    for entry in (e for e in os.listdir("/proc") if e.isdigit()):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if _parent(int(entry)) == pid:
                found.append(int(entry))
    return found


def _kill_and_watch(tmp_path: Path, *, kill: str) -> list[int]:
    """Start an owner of two ranks, SIGKILL the owner ("owner") or the server and then the owner
    ("both": nothing is left to stop the ranks but the kernel) once both ranks wait, and return what
    is still running `GONE_WITHIN_S` later of the ranks, the server and the resource tracker."""
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "LIFECYCLE_RANKS_START": "forkserver"},
    )
    ranks: list[int] = []
    try:
        end = time.monotonic() + 300
        while len(ranks) < 2 and time.monotonic() < end and owner.poll() is None:
            time.sleep(0.1)
            ranks = [int(p.read_text()) for p in sorted(tmp_path.glob("rank-*")) if p.read_text()]
        assert len(ranks) == 2, f"the ranks did not start (owner exit status {owner.poll()})"
        server = _parent(ranks[0])
        assert server != owner.pid and _parent(server) == owner.pid  # forked from the server
        tracker = [p for p in _children(owner.pid) if b"resource_tracker" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert len(tracker) == 1, f"the owner's resource tracker was not found among {_children(owner.pid)}"
        time.sleep(0.5)  # both wait (each writes its pid just before)
        if kill == "both":
            os.kill(server, signal.SIGKILL)
        os.kill(owner.pid, signal.SIGKILL)
        return _left_after([*ranks, server, *tracker], GONE_WITHIN_S)
    finally:
        owner.kill()
        owner.wait()
        _kill([p for p in ranks if _running(p)])


@pytest.mark.slow  # the owner's fork server imports torch and megatron-core
def test_after_the_owner_is_sigkilled_its_ranks_get_sigterm_then_sigkill_and_none_is_left(tmp_path: Path) -> None:
    left = _kill_and_watch(tmp_path, kill="owner")
    assert not left, f"still running {GONE_WITHIN_S:g} s after the owner's SIGKILL: {left}"
    assert (tmp_path / "released-1").exists(), "rank 1 was not given SIGTERM to release before it was killed"
    assert not (tmp_path / "released-0").exists()  # its handler could not run: SIGKILL ended it


@pytest.mark.slow
def test_after_the_fork_server_and_the_owner_are_sigkilled_no_rank_is_left(tmp_path: Path) -> None:
    left = _kill_and_watch(tmp_path, kill="both")
    assert not left, f"still running {GONE_WITHIN_S:g} s after the server's and the owner's SIGKILL: {left}"


def test_ranks_past_timeout_s_are_stopped_before_run_ranks_raises_even_one_stuck_in_native_code(tmp_path: Path) -> None:
    with pytest.raises(RankFailed) as failed:
        run_ranks(_rank_zero_sticks_rank_one_releases, 2, str(tmp_path), timeout_s=5)
    assert failed.value.errors == {0: "timed out after 5 s", 1: "timed out after 5 s"}
    ranks = [int(p.read_text()) for p in sorted(tmp_path.glob("rank-*"))]
    left = [p for p in ranks if _running(p)]  # at once: run_ranks waits for them
    _kill(left)
    assert len(ranks) == 2 and not left, f"ranks {ranks}: still running after run_ranks raised: {left}"
    assert (tmp_path / "released-1").exists(), "rank 1 was not given SIGTERM to release before it was killed"
