"""`die_with_parent` (lifecycle/launchers/local.py), what every rank and torchrun itself call: the kernel
sends SIGTERM to a process whose parent died, even by SIGKILL, and a parent already gone before the
call is caught at once. Real processes and signals: a parent SIGKILLed, its child's SIGTERM handler
writing what it got to a file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from lifecycle.testing import process_alive

CHILD = """
import signal, sys, time
from pathlib import Path
from lifecycle.launchers.local import die_with_parent

def ended(signum, _frame):
    Path(sys.argv[1]).write_text(signal.Signals(signum).name)
    sys.exit(0)

signal.signal(signal.SIGTERM, ended)
armed = die_with_parent()
Path(sys.argv[1] + ".armed").write_text(str(armed))
time.sleep(120)
"""

PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
print(child.pid, flush=True)
time.sleep(120)
"""


def test_a_process_whose_parent_is_sigkilled_gets_sigterm_from_the_kernel(tmp_path: Path) -> None:
    said = tmp_path / "signal"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD, str(said)], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        deadline = time.monotonic() + 60
        while not Path(f"{said}.armed").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert Path(f"{said}.armed").read_text() == "True"
        parent.kill()
        parent.wait()
        killed = time.monotonic()
        while process_alive(child) and time.monotonic() - killed < 10:
            time.sleep(0.05)
        assert not process_alive(child), "the child outlived its SIGKILLed parent"
        assert said.read_text() == "SIGTERM"
    finally:
        if process_alive(child):
            os.kill(child, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()


def test_a_parent_gone_before_the_call_is_caught_at_once() -> None:
    code = (
        "import time\nfrom lifecycle.launchers.local import die_with_parent\ndie_with_parent(parent=0)\ntime.sleep(60)"
    )
    done = subprocess.run([sys.executable, "-c", code], timeout=30)
    assert done.returncode == -signal.SIGTERM
