"""A record that cannot be one (a field of the wrong type, a negative rank, a world of no rank) is
refused the same way by `lifecycle audit`, `lifecycle report` and `lifecycle export`: one reader,
exit 2, the same line naming file:line and the field; never a rank taken for dead or a page drawn
from it. The writer never writes a negative rank, nor a world of no rank."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from audit_logs import clean_events, rechain, write_events

from lifecycle.log import AuditLog

ROOT = Path(__file__).resolve().parents[3]


def _commands(logs: Path, out: Path) -> dict[str, list[str]]:
    return {
        "audit": ["audit", "--format", "verdict", str(logs)],
        "report": ["report", str(logs), "-o", str(out / "report.html")],
        "export": ["export", str(logs), "--format", "chrome", "-o", str(out / "trace.json")],
    }


def _negative_rank(records: list[dict[str, Any]]) -> None:
    for rec in records:
        rec["rank"] = -1


def _world_of_none(records: list[dict[str, Any]]) -> None:
    for rec in records:
        rec["world_size"] = 0


def _string_seq(records: list[dict[str, Any]]) -> None:
    records[2]["seq"] = str(records[2]["seq"])


@pytest.mark.parametrize(
    ("edit", "line", "said"),
    [
        (_negative_rank, 1, "field 'rank' is -1, expected a rank of 0 or more"),
        (_world_of_none, 1, "field 'world_size' is 0, expected a world size of 1 or more"),
        (_string_seq, 3, "field 'seq' is '2', expected an int"),
    ],
    ids=["negative rank", "a world of no rank", "seq a string"],
)
def test_audit_report_and_export_refuse_a_bad_record_with_the_same_line(
    tmp_path: Path, edit: Any, line: int, said: str
) -> None:
    logs, out = tmp_path / "logs", tmp_path / "out"
    out.mkdir()
    write_events(logs, clean_events(), rank=0, world=2, run_id="r")
    path = write_events(logs, clean_events(), rank=1, world=2, run_id="r")
    rechain(path, edit)
    for name, command in _commands(logs, out).items():
        done = subprocess.run(
            [sys.executable, "-m", "lifecycle", *command], capture_output=True, text=True, cwd=ROOT, timeout=120
        )
        assert done.returncode == 2, (name, done.stdout, done.stderr)
        assert f"lifecycle {name}: {path}:{line}: {said}." in done.stderr.splitlines(), (name, done.stderr)
    assert sorted(p.name for p in out.iterdir()) == []  # nothing drawn from an unreadable log


def test_the_writer_refuses_a_negative_rank(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="rank -1: a rank is 0 or more"):
        AuditLog(run_id="r", rank=-1, world_size=2)
    assert list(tmp_path.iterdir()) == []


def test_the_writer_refuses_a_world_of_no_rank(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="world_size 0: a world holds 1 rank or more"):
        AuditLog(run_id="r", rank=0, world_size=0)
    log = AuditLog(run_id="r", rank=0, world_size=2)
    with pytest.raises(ValueError, match="world_size 0: a world holds 1 rank or more"):
        log.rebind(world_size=0)
    assert log.world_size == 2 and list(tmp_path.iterdir()) == []
