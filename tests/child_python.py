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
