"""The ranks' fork server (lifecycle/launchers/_preload.py) ends without the interpreter's teardown of
torch and megatron-core, seconds of CPU after its owner ended, while a rank forked from it still runs
its own exit functions (`local._leave`: a lifecycle left open is shut down). A real interpreter that
imported the server's modules, and a real fork of it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the child imports torch and megatron-core
ROOT = Path(__file__).resolve().parents[2]
SERVER = """
import atexit, importlib, os, sys
from pathlib import Path

out = Path(sys.argv[1])
atexit.register(lambda: (out / f"teardown-{os.getpid()}").touch())  # before the imports, as torch's are
from lifecycle.launchers.local import PRELOAD
importlib.import_module(PRELOAD)  # what the server imports first
rank = os.fork()
if rank == 0:
    atexit._run_exitfuncs()  # what a forked rank runs at its end
    os._exit(0)
os.waitpid(rank, 0)
(out / "rank").write_text(str(rank))
raise SystemExit  # as the stdlib's server ends when its owner does
"""


def test_the_server_skips_the_interpreters_teardown_and_a_rank_forked_from_it_does_not(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SERVER, str(tmp_path)],
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rank = (tmp_path / "rank").read_text()
    assert sorted(p.name for p in tmp_path.glob("teardown-*")) == [f"teardown-{rank}"]
