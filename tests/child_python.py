"""Run a Python child with a directory ahead of the repository on its path (a changed copy of
`states/`, say) and read the JSON it prints last: how a test shows what a changed table or rule
set does to the engine, the audit and the fuzzer's checker, without changing them here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def last_json_of(code: str, *args: str, first_on_path: Path) -> Any:
    """Run `code` with `args` in `first_on_path` (also first on its path); fail with its stderr
    unless it exits 0; return the JSON of its last line of output."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(first_on_path), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=first_on_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def run_lifecycle(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """`python -m lifecycle ARGS` from the repository, with nothing of this environment but the path
    and the records' strict mode (no launcher variables leak in), its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "lifecycle", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        # the record schema's strict mode (tests/conftest.py) is the one variable passed on
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "LIFECYCLE_STRICT_RECORDS": "1"},
    )


_MANY = """
import contextlib, io, json, sys
from lifecycle.cli import main
done = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as stop:  # argparse's refusals
            code = stop.code if isinstance(stop.code, int) else 1
    done.append({"argv": argv, "returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
print(json.dumps(done))
"""


def run_lifecycle_many(*argvs: list[str], timeout: int = 300) -> list[subprocess.CompletedProcess[str]]:
    """`lifecycle ARGV` for each of `argvs`, one after another in one process (as `run_lifecycle`, one
    interpreter for all): for commands that start no rank, whose refusal is all that is read."""
    done = subprocess.run(
        [sys.executable, "-c", _MANY, json.dumps(argvs)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "LIFECYCLE_STRICT_RECORDS": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [
        subprocess.CompletedProcess(d["argv"], d["returncode"], d["stdout"], d["stderr"])
        for d in json.loads(done.stdout.splitlines()[-1])
    ]
