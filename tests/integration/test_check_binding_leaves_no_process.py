"""A `lifecycle check-binding` killed (SIGKILL) or stopped (SIGTERM) leaves no process it created:
the fork server its ranks are forked from, multiprocessing's resource tracker and the ranks are
gone within seconds, whether it is killed while the ranks run or while the server is still importing
torch and megatron-core (about 10 s, during which the server cannot read its owner's end on its
pipe). Every process of a run is found by a marker in its environment, so that one that left the
process tree is found too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from lifecycle.testing import process_alive

pytestmark = [pytest.mark.slow, pytest.mark.release_independent]  # the floor skips it (scripts/test)
ROOT = Path(__file__).resolve().parents[2]
MARK = "LIFECYCLE_TEST_PROCESS_MARK"
HANG_S = 30.0
"""A bound that only a process left behind reaches: the times seen are printed."""
SERVER = "multiprocessing.forkserver import main"
TRACKER = "multiprocessing.resource_tracker import main"
SLOW_IMPORTS = f"""
import os, sys, time
from pathlib import Path

class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            Path(os.environ["IMPORTING"]).touch()
            time.sleep(600)  # the fork server's imports, as long as a loaded machine can make them
        return None

if {SERVER!r} in Path("/proc/self/cmdline").read_bytes().decode(errors="replace"):
    sys.meta_path.insert(0, Blocked())
"""
"""A `sitecustomize` that makes the fork server's import of torch last 10 minutes (only there)."""


def _marked(mark: str) -> dict[int, str]:
    """Every live process whose environment holds `mark`: pid -> its command line."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if f"{MARK}={mark}".encode() not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # ended meanwhile
            continue
        if process_alive(int(entry.name)):
            found[int(entry.name)] = line
    return found


def _check_binding(mark: str, path: str, **more: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "lifecycle", "check-binding", "--provider", "copying"],
        cwd=ROOT,
        env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin", MARK: mark, **more},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _kill_when(
    owner: subprocess.Popen[str], mark: str, ready: int, sig: signal.Signals, importing: Path | None = None
) -> tuple[dict[int, str], float]:
    """Send `sig` to `owner` once `ready` processes besides it carry `mark` (and the server is in
    its import of torch, with `importing`); those processes, and when it was sent."""
    deadline = time.monotonic() + 300
    while len(others := {p: c for p, c in _marked(mark).items() if p != owner.pid}) < ready or (
        importing is not None and not importing.exists()
    ):
        assert owner.poll() is None, owner.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"never {ready} processes: {others}"
        time.sleep(0.05)
    owner.send_signal(sig)
    return others, time.monotonic()


def _gone_after(owner: subprocess.Popen[str], mark: str, sent: float) -> tuple[float, dict[int, str]]:
    """How long after the signal `sent` every marked process was gone, and those left `HANG_S` after
    (killed then)."""
    while (left := _marked(mark)) and time.monotonic() - sent < HANG_S:
        time.sleep(0.05)
    took = time.monotonic() - sent
    for pid in left:  # ended here, so that the test ends
        if process_alive(pid):
            os.kill(pid, signal.SIGKILL)
    owner.communicate(timeout=60)  # its stderr: open until the last process holding it ended
    return took, left


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_check_binding_ended_while_its_ranks_run_leaves_no_process(sig: signal.Signals) -> None:
    mark = uuid.uuid4().hex
    owner = _check_binding(mark, str(ROOT))
    started, sent = _kill_when(owner, mark, ready=4, sig=sig)  # the tracker, the server, 2 ranks
    took, left = _gone_after(owner, mark, sent)
    print(f"{sig.name} while 2 ranks ran: {len(started)} processes gone {took:.2f} s after the signal")
    commands = list(started.values())
    assert sum(SERVER in c for c in commands) == 3 and sum(TRACKER in c for c in commands) == 1, commands
    assert left == {}, f"outlived the owner ({sig.name}): {left}"
    assert owner.returncode == (-sig if sig == signal.SIGKILL else 128 + sig)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_check_binding_ended_while_its_fork_server_imports_leaves_no_process(
    sig: signal.Signals, tmp_path: Path
) -> None:
    (tmp_path / "sitecustomize.py").write_text(SLOW_IMPORTS)
    mark = uuid.uuid4().hex
    importing = tmp_path / "importing"
    owner = _check_binding(mark, os.pathsep.join([str(tmp_path), str(ROOT)]), IMPORTING=str(importing))
    started, sent = _kill_when(owner, mark, ready=2, sig=sig, importing=importing)  # the tracker, the server
    took, left = _gone_after(owner, mark, sent)
    print(f"{sig.name} during the server's imports: {len(started)} processes gone {took:.2f} s after the signal")
    commands = list(started.values())
    assert sum(SERVER in c for c in commands) == 1 and sum(TRACKER in c for c in commands) == 1, commands
    assert left == {}, f"outlived the owner ({sig.name}): {left}"
