"""How the audit reads `launcher-NNNNN.jsonl` (`lifecycle run`'s own record of how its ranks ended),
with real files: its size bound, a symlink or a bad line refused with one reason naming file:line, a
chain edited by hand refused as tampered, and the bounds on what one record may carry."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from audit_logs import rechain

from lifecycle.audit import audit, judge
from lifecycle.log import records
from lifecycle.testing import launcher_path, read_launches, write_launch_ended

MIB = 1 << 20
"""The largest launcher file the audit reads (a record is a few hundred bytes a launch)."""


def launch_ended(**fields: Any) -> records.LaunchEnded:
    given: dict[str, Any] = {"node_rank": 0, "host": "node-7", "nproc": 4, "exit": 1, "signal": None, "ended": []}
    return records.LaunchEnded(**(given | fields))


def write(log_dir: Path, node: int = 0, **fields: Any) -> Path:
    record = launch_ended(node_rank=node, **fields)
    path = write_launch_ended(log_dir, run_id="run-k", node_rank=node, world_size=4, record=record)
    assert isinstance(path, Path), path
    return path


def padded_to(log_dir: Path, size: int) -> Path:
    """A valid one-record launcher file of exactly `size` bytes (its host name padded)."""
    path = write(log_dir)
    base = len(path.read_bytes())

    def pad(recs: list[dict[str, Any]]) -> None:
        recs[0]["host"] = "n" * (size - base + len("node-7"))

    rechain(path, pad)
    assert len(path.read_bytes()) == size
    return path


def test_a_launcher_file_of_exactly_one_mib_is_read(tmp_path: Path) -> None:
    read = read_launches([str(padded_to(tmp_path, MIB))])
    assert not read.errors and not read.broken
    assert [launch.exit for launch in read.launches] == [1]


def test_a_launcher_file_one_byte_over_one_mib_is_unreadable_not_read_in_part(tmp_path: Path) -> None:
    path = padded_to(tmp_path, MIB + 1)
    read = read_launches([str(path)])
    assert read.launches == [] and read.broken == []
    assert [(e.source, e.line, e.reason) for e in read.errors] == [
        (str(path), None, f"more than {MIB} bytes: not a launcher record file")
    ]


def test_a_symlink_at_the_launcher_path_is_not_followed(tmp_path: Path) -> None:
    """Someone's link in the log directory: never opened through (O_NOFOLLOW), one reason, no traceback."""
    (tmp_path / "elsewhere").mkdir()
    real = write(tmp_path / "elsewhere", ended=[{"rank": 1, "exitcode": -9, "signal": "SIGKILL", "ts": 1.0}])
    link = launcher_path(tmp_path, 0)
    os.symlink(real, link)
    read = read_launches([str(link), str(write(tmp_path, node=1))])
    assert [(e.source, e.line, e.reason) for e in read.errors] == [
        (str(link), None, "cannot read: Too many levels of symbolic links")
    ]
    assert [launch.node_rank for launch in read.launches] == [1]  # the other node's file is still read


def test_a_line_that_is_not_a_launch_ended_record_makes_the_file_unreadable_at_that_line(tmp_path: Path) -> None:
    path = write(tmp_path)
    path.write_bytes(path.read_bytes() + b"not json\n")
    read = read_launches([str(path), str(write(tmp_path, node=1))])
    assert [(e.source, e.line) for e in read.errors] == [(str(path), 2)]
    assert read.errors[0].reason.startswith("not a launch_ended record (")
    assert [launch.node_rank for launch in read.launches] == [1]
    doc = judge(audit([str(tmp_path)], jobs=1))
    assert doc["outcome"] == "unreadable" and f"{path}:2" in doc["where"]  # type: ignore[operator]


def test_the_reason_for_a_bad_record_quotes_at_most_120_characters_of_the_decoder(tmp_path: Path) -> None:
    path = launcher_path(tmp_path, 0)
    path.write_bytes(orjson.dumps({"event": "x" * 400}) + b"\n")
    (error,) = read_launches([str(path)]).errors
    quoted = error.reason.removeprefix("not a launch_ended record (").removesuffix(")")
    assert len(quoted) == 120 and quoted.startswith("Invalid value 'xxx")


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda recs: recs[1].update(seq=5), id="seq"),
        pytest.param(lambda recs: recs.pop(0), id="first-removed"),
    ],
)
def test_a_chain_rehashed_by_hand_does_not_verify_when_a_seq_is_wrong(tmp_path: Path, edit: Any) -> None:
    """Each record's `seq` must be its line's: a record renumbered or removed, its hashes recomputed,
    is tampered at that line."""
    write(tmp_path)
    path = write(tmp_path, exit=0)
    rechain(path, edit)
    read = read_launches([str(path)])
    line = len(path.read_bytes().splitlines())
    assert read.broken == [f"{path}:{line}"] and read.launches == []


def test_a_record_names_at_most_64_ended_ranks_and_signal_names_of_16_characters(tmp_path: Path) -> None:
    ended = [{"rank": r, "exitcode": -9, "signal": "SIGKILL" + "X" * 20, "ts": 1.0 + r} for r in range(70)]
    (launch,) = read_launches([str(write(tmp_path, ended=ended))]).launches
    assert [e.rank for e in launch.ended] == list(range(64))
    assert {e.signal for e in launch.ended} == {("SIGKILL" + "X" * 20)[:16]}


def test_each_end_keeps_its_exit_code_and_time_and_drops_what_is_not_one(tmp_path: Path) -> None:
    ended: list[dict[str, object]] = [
        {"rank": 2, "exitcode": 1, "signal": None, "ts": 5},
        {"rank": 3, "exitcode": "1", "signal": 9, "ts": "5"},
        {"rank": "4", "exitcode": 1},
    ]
    (launch,) = read_launches([str(write(tmp_path, ended=ended))]).launches
    assert [(e.rank, e.exitcode, e.signal, e.ts) for e in launch.ended] == [(2, 1, None, 5.0), (3, None, None, None)]
    assert type(launch.ended[0].ts) is float
