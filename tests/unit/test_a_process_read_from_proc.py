"""`proc_stat`, the one reader of /proc/<pid>/stat, on real processes: the rank watch's liveness and
pid-reuse checks and the rank server's search for its ranks read through it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lifecycle.launchers import proc_stat
from lifecycle.testing import owner

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="Linux /proc")

SLEEPER = "import sys, time; print('ready', flush=True); time.sleep(60)"
# A name that reads as other fields to a parser that splits at the first ')' (a zombie whose parent is
# pid 1) or takes the name up to it: `prctl(PR_SET_NAME)` lets a process choose any 15 bytes.
NAME = "a (b) Z 1 2 ) c"
NAMED = (
    "import ctypes, sys, time\n"
    f"ctypes.CDLL(None).prctl(15, {NAME.encode()!r}, 0, 0, 0)  # PR_SET_NAME\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def _start(code: str, *, own_group: bool = False) -> subprocess.Popen[str]:
    group = 0 if own_group else None
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, process_group=group)
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    return child


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
        child.wait()


def _boot_s() -> float:
    line = next(x for x in Path("/proc/stat").read_text().splitlines() if x.startswith("btime "))
    return float(line.split()[1])


def test_a_running_child_reads_as_itself_its_parents_and_its_start(children: list[subprocess.Popen[str]]) -> None:
    before = time.time()
    child = _start(SLEEPER)
    children.append(child)
    after = time.time()
    first, second = proc_stat(child.pid), proc_stat(child.pid)
    assert first is not None and first == second, "the same process reads the same twice"
    assert (first.pid, first.ppid, first.pgrp) == (child.pid, os.getpid(), os.getpgrp())
    assert first.state in ("S", "R") and not first.ended
    assert first.comm == Path(sys.executable).name[:15]
    started_at = _boot_s() + first.starttime / os.sysconf("SC_CLK_TCK")
    assert before - 2 <= started_at <= after + 2, (before, started_at, after)


def test_a_later_child_started_later_and_a_child_in_its_own_group_reads_as_its_leader(
    children: list[subprocess.Popen[str]],
) -> None:
    early = _start(SLEEPER)
    children.append(early)
    time.sleep(0.1)  # ten clock ticks at the usual 100 a second
    late = _start(SLEEPER, own_group=True)
    children.append(late)
    me, one, two = proc_stat(os.getpid()), proc_stat(early.pid), proc_stat(late.pid)
    assert me is not None and one is not None and two is not None
    assert me.starttime <= one.starttime < two.starttime
    assert one.pgrp == os.getpgrp() and two.pgrp == late.pid


def test_an_ended_child_reads_as_ended_until_reaped_and_then_as_none(children: list[subprocess.Popen[str]]) -> None:
    child = _start(SLEEPER)
    children.append(child)
    os.kill(child.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while (stat := proc_stat(child.pid)) is not None and not stat.ended and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stat is not None and stat.state == "Z" and stat.ended and stat.ppid == os.getpid()
    child.wait()
    assert proc_stat(child.pid) is None


def test_a_name_with_spaces_and_parentheses_does_not_shift_the_fields(children: list[subprocess.Popen[str]]) -> None:
    child = _start(NAMED)
    children.append(child)
    stat = proc_stat(child.pid)
    assert stat is not None and stat.comm == NAME
    assert stat.state in ("S", "R") and not stat.ended
    assert (stat.pid, stat.ppid, stat.pgrp) == (child.pid, os.getpid(), os.getpgrp())
    mine = proc_stat(os.getpid())
    assert mine is not None and mine.starttime <= stat.starttime


def test_a_pid_that_names_no_process_reads_as_none() -> None:
    assert proc_stat(2**22 + 1) is None  # above the kernel's largest pid (pid_max <= 2**22)


def test_a_rank_owner_record_names_its_start_time_which_a_process_reusing_its_pid_would_not_share() -> None:
    pid, start, _ = owner().split(":", 2)
    me = proc_stat(os.getpid())
    assert me is not None and (pid, start) == (str(me.pid), str(me.starttime))
