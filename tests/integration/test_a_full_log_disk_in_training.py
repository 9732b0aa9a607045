"""A log disk that fills up during training: `lifecycle run` goes on training (the lifecycle is
FAILED, `lc.record` never raises for the log), and says so at once on stderr in one line, before the
next step's record; the records go on to stderr as JSON lines. A real tmpfs filled by a real file
while the run trains (root only: skipped where it cannot be mounted)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.release_independent]  # the floor skips it (scripts/test)
ROOT = Path(__file__).resolve().parents[2]
STEPS = 100
UNLOGGED = "the lifecycle is FAILED and training goes on unlogged"


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs, unmounted after the test."""
    where = tmp_path / "disk"
    where.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)]
    if subprocess.run(mount, capture_output=True, check=False).returncode != 0:
        pytest.skip("a tmpfs cannot be mounted here (needs root); tests/unit/test_engine_failures.py injects ENOSPC")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill_once_training(rank_file: Path, disk: Path, run: subprocess.Popen[str]) -> None:
    """Once the rank file holds a `step_completed`, fill the disk with a file of ours to its last byte."""
    while run.poll() is None and b'"event":"step_completed"' not in (
        rank_file.read_bytes() if rank_file.exists() else b""
    ):
        time.sleep(0.02)
    chunk = b"\0" * 4096
    with (disk / "filler").open("wb", buffering=0) as filler:
        try:
            while True:
                filler.write(chunk)
        except OSError:  # ENOSPC: whole pages are gone; the last bytes of a page, one at a time
            with contextlib.suppress(OSError):
                while True:
                    filler.write(b"\0")


def test_a_full_log_disk_in_training_goes_on_training_and_says_so_at_once_on_stderr(disk: Path) -> None:
    logs = disk / "logs"
    run = subprocess.Popen(
        [sys.executable, "-m", "lifecycle", "run", "--steps", str(STEPS), "--log-dir", str(logs)],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "LIFECYCLE_STRICT_RECORDS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    filling = threading.Thread(target=_fill_once_training, args=(logs / "rank-00000.jsonl", disk, run), daemon=True)
    filling.start()
    out, err = run.communicate(timeout=600)
    filling.join(timeout=10)
    assert f"step {STEPS}/{STEPS}:" in out, (out[-2000:], err[-3000:])  # it trained every step
    lines = err.splitlines()
    records = {n: json.loads(line) for n, line in enumerate(lines) if line.startswith("{")}
    failed = next(n for n, r in records.items() if r["event"] == "log_write_failed")
    assert records[failed]["errno"] == 28, records[failed]
    said = [n for n, line in enumerate(lines) if UNLOGGED in line]
    assert len(said) == 1, err[-3000:]
    line = lines[said[0]]
    assert line.startswith("lifecycle: rank 0: the startup log ") and "No space left on device" in line
    assert line.endswith("Free the disk or choose another logging.log_dir."), line
    later_steps = [n for n, r in records.items() if n > failed and r["event"] == "step_completed"]
    assert later_steps and said[0] < later_steps[0], "said before the next step's record, not at the end"
    assert run.returncode == 1 and "done" not in out, (run.returncode, out[-500:])  # never 'done' with exit 0
    assert (
        lines[-1] == "lifecycle run: rank 0: trained with its startup log unwritten (No space left on device); exit 1."
    )
