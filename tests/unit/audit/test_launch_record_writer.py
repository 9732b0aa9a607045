"""`lifecycle run`'s record of how its ranks ended (`lifecycle/cli/_launch_record.py`), as written: each
rank's entry (its exit code, the signal that ended it, when torchrun saw it), the run id it is filed
under, the envelope and the file's mode, and a launcher file that is not one chain of our records left
alone: cut, renumbered, re-chained, edited, another event, or past the 1 MiB it reads. Real files."""

from __future__ import annotations

import os
import stat
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from lifecycle.log import GENESIS, record_hash, records
from lifecycle.testing import ended_entry, launcher_path, run_id_of, write_launch_ended


def launch_ended() -> records.LaunchEnded:
    return records.LaunchEnded(node_rank=0, host="node-7", nproc=4, exit=1, signal=None, ended=[])


def write(log_dir: Path) -> Path | str:
    return write_launch_ended(log_dir, run_id="run-k", node_rank=0, world_size=4, record=launch_ended())


@pytest.mark.parametrize(
    ("exitcode", "signal"),
    [(-9, "SIGKILL"), (-15, "SIGTERM"), (-1, "SIGHUP"), (1, None), (0, None), (None, None), (-999, None)],
)
def test_each_rank_is_kept_with_the_signal_that_ended_it_and_only_that(
    exitcode: int | None, signal: str | None
) -> None:
    entry = ended_entry(3, 1, exitcode, None)
    assert entry == {"rank": 3, "local_rank": 1, "exitcode": exitcode, "signal": signal, "ts": None}


def test_when_torchrun_saw_a_rank_end_is_its_local_time_in_unix_seconds_or_nothing() -> None:
    seen = ended_entry(0, 0, 1, " 2026-12-07_05:26:30 ")["ts"]
    assert seen == datetime(2026, 12, 7, 5, 26, 30).timestamp()
    assert ended_entry(0, 0, 1, "yesterday")["ts"] is None


def _rank_file(log_dir: Path, rank: int, first: bytes) -> None:
    (log_dir / f"rank-{rank:05d}.jsonl").write_bytes(first + b"\n")


def test_the_run_id_is_the_launchs_where_set_else_the_first_rank_file_that_says_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LIFECYCLE_RUN_ID", raising=False)
    assert run_id_of(tmp_path) is None
    _rank_file(tmp_path, 0, b"{not json")
    _rank_file(tmp_path, 1, b'{"run_id": 7}')
    _rank_file(tmp_path, 2, b'["run-x"]')
    _rank_file(tmp_path, 3, b'{"run_id": "run-3"}')
    _rank_file(tmp_path, 4, b'{"run_id": "run-4"}')
    assert run_id_of(tmp_path) == "run-3", "past an unreadable first line, a run id of another type and a list"
    monkeypatch.setenv("LIFECYCLE_RUN_ID", "given")
    assert run_id_of(tmp_path) == "given"


def test_the_run_id_is_looked_for_in_the_first_eight_rank_files_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LIFECYCLE_RUN_ID", raising=False)
    for rank in range(8):
        _rank_file(tmp_path, rank, b"{}")
    _rank_file(tmp_path, 8, b'{"run_id": "too-far"}')
    assert run_id_of(tmp_path) is None
    (tmp_path / "rank-00008.jsonl").rename(tmp_path / "rank-00007.jsonl")
    assert run_id_of(tmp_path) == "too-far"


def test_the_record_has_the_envelope_of_a_node_agents_first_launch_and_a_file_others_can_read(tmp_path: Path) -> None:
    path = write(tmp_path)
    assert isinstance(path, Path)
    (rec,) = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert (rec["generation"], rec["seq"], rec["prev_hash"], rec["rank"], rec["world_size"]) == (0, 0, GENESIS, 0, 4)
    assert rec["run_id"] == "run-k" and abs(rec["ts"] - time.time()) < 60
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _chain(count: int) -> bytes:
    """`count` launch_ended records of one chain, as the writer writes them."""
    out, prev = [], GENESIS
    for seq in range(count):
        body: dict[str, Any] = {"event": "launch_ended", "seq": seq, "prev_hash": prev, "run_id": "r", "rank": 0}
        body |= {"world_size": 1, "generation": 0, "ts": 1.0, "node_rank": 0, "host": "h", "nproc": 1, "exit": 0}
        body |= {"signal": None, "ended": []}
        prev = record_hash(body)
        out.append(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)[:-1] + b',"hash":"' + prev.encode() + b'"}\n')
    return b"".join(out)


def _edits() -> dict[str, Any]:
    one = _chain(2).splitlines(keepends=True)

    def changed(line: bytes, **fields: Any) -> bytes:
        return orjson.dumps(orjson.loads(line) | fields) + b"\n"

    def rehashed(line: bytes, **fields: Any) -> bytes:  # changed, and its own hash made right again
        body = {k: v for k, v in orjson.loads(line).items() if k != "hash"} | fields
        return orjson.dumps(body | {"hash": record_hash(body)}, option=orjson.OPT_SORT_KEYS) + b"\n"

    return {
        "cut": one[0] + one[1][:-1],
        "renumbered": one[0] + changed(one[1], seq=5),
        "renumbered, its hash right": one[0] + rehashed(one[1], seq=5),
        "re-chained, its hash right": one[0] + rehashed(one[1], prev_hash=GENESIS),
        "another event": changed(one[0], event="step_completed") + one[1],
        "re-chained": one[0] + changed(one[1], prev_hash=GENESIS),
        "hash of another type": one[0] + changed(one[1], hash=7),
        "edited": one[0] + changed(one[1], exit=3),
        "a list": b"[1]\n",
    }


@pytest.mark.parametrize("edit", list(_edits()))
def test_a_launcher_file_that_is_not_one_chain_of_ours_is_left_as_it_is(tmp_path: Path, edit: str) -> None:
    theirs = launcher_path(tmp_path, 0)
    theirs.write_bytes(_edits()[edit])
    said = write(tmp_path)
    assert isinstance(said, str) and "left as it is" in said
    assert theirs.read_bytes() == _edits()[edit]


def test_a_chain_of_ours_is_continued(tmp_path: Path) -> None:
    launcher_path(tmp_path, 0).write_bytes(_chain(3))
    path = write(tmp_path)
    assert isinstance(path, Path)
    last = orjson.loads(path.read_bytes().splitlines()[-1])
    assert last["seq"] == 3 and last["prev_hash"] == orjson.loads(_chain(3).splitlines()[-1])["hash"]


def test_a_launcher_file_of_three_quarters_of_a_mib_is_read_whole_and_continued(tmp_path: Path) -> None:
    count = (3 << 18) // len(_chain(1))  # about 768 KiB of records: within the 1 MiB the writer reads
    launcher_path(tmp_path, 0).write_bytes(_chain(count))
    path = write(tmp_path)
    assert isinstance(path, Path), path
    assert orjson.loads(path.read_bytes().splitlines()[-1])["seq"] == count


def test_a_launcher_file_past_the_mib_it_reads_is_left_as_it_is(tmp_path: Path) -> None:
    """A node agent's 1 MiB of launches (some thousands): the writer reads no further and appends nothing."""
    lines = _chain(6000)
    assert 1 << 20 < len(lines) < 2 << 20
    theirs = launcher_path(tmp_path, 0)
    theirs.write_bytes(lines)
    said = write(tmp_path)
    assert isinstance(said, str) and "left as it is" in said and theirs.read_bytes() == lines
