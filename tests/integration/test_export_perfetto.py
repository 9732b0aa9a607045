"""Perfetto's trace processor loads the Chrome trace: a slice per state of every rank, and the root
cause's flows. Needs `trace_processor_shell` (on PATH or in $TRACE_PROCESSOR_SHELL): the `perfetto`
PyPI package downloads it from commondatastorage.googleapis.com on first use, which a machine that
reaches only package registries cannot, so the test skips there (docs/observability.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "export"))

from export_logs import failed_run

from lifecycle.cli import main

SHELL = os.environ.get("TRACE_PROCESSOR_SHELL") or shutil.which("trace_processor_shell")
pytestmark = pytest.mark.skipif(
    SHELL is None,
    reason="no trace_processor_shell (set TRACE_PROCESSOR_SHELL): the "
    "perfetto package downloads it from the internet, unreachable here",
)


def query(trace: Path, sql: str, tmp_path: Path) -> list[str]:
    assert SHELL is not None
    script = tmp_path / "q.sql"
    script.write_text(sql)
    run = subprocess.run([SHELL, "-q", str(script), str(trace)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return [line.strip('"') for line in run.stdout.split()[1:]]


def test_perfetto_loads_the_slices_and_flows_of_a_failed_run(tmp_path: Path) -> None:
    logs = failed_run(tmp_path / "logs")
    trace = tmp_path / "trace.json.gz"
    assert main(["export", str(logs), "-o", str(trace)]) == 0
    processes = query(trace, "select name from process where name like 'rank %' order by name;", tmp_path)
    assert processes == ["rank 0", "rank 1", "rank 2", "rank 3"]
    assert query(trace, "select count(*) from flow;", tmp_path) == ["3"]
    assert int(query(trace, "select count(*) from slice where name = 'VALIDATED';", tmp_path)[0]) == 4
