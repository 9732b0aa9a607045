"""`lifecycle run`'s own record of a launch (`launch_ended`): how its torchrun's ranks ended, written to
`<log_dir>/launcher-<node>.jsonl`, hash-chained like a rank's log, one record per node agent per
launch (16,384 files of one line at 131,072 ranks on 8-rank nodes; nothing per rank).

torchrun's failure report (on its stderr, `TorchrunReport`) names the ranks that ended badly, with
their exit codes and when it saw them; the first it observed is its "Root Cause". A file that holds
anything else than our records is left alone (never touched, one line says so).
"""

from __future__ import annotations

import os
import signal
import socket
import time
from datetime import datetime
from pathlib import Path

import msgspec
import orjson

from lifecycle.log import GENESIS, JSONValue, line_hash_matches, record_hash, records

_WRITE = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
_ENVELOPE = frozenset(records.Record.__struct_fields__)


def launcher_path(log_dir: str | Path, node_rank: int) -> Path:
    return Path(log_dir) / f"launcher-{node_rank:05d}.jsonl"


def ended_entry(rank: int, local_rank: int | None, exitcode: int | None, when: str | None) -> dict[str, object]:
    """One rank of torchrun's failure report as the record keeps it (`launch_ended.ended`)."""
    killed = exitcode is not None and exitcode < 0 and -exitcode in signal.valid_signals()
    return {
        "rank": rank,
        "local_rank": local_rank,
        "exitcode": exitcode,
        "signal": signal.Signals(-exitcode).name if killed and exitcode is not None else None,
        "ts": _when(when),
    }


def _when(text: str | None) -> float | None:
    """torchrun's `time : 2026-12-07_05:26:30` (local time) as Unix seconds."""
    try:
        return datetime.strptime(text.strip(), "%Y-%m-%d_%H:%M:%S").timestamp() if text else None
    except ValueError:
        return None


def run_id_of(log_dir: Path) -> str | None:
    """The run id the ranks wrote (`LIFECYCLE_RUN_ID` where the launch set it; else a rank file's first record)."""
    given = os.environ.get("LIFECYCLE_RUN_ID")
    if given:
        return given
    for path in sorted(log_dir.glob("rank-*.jsonl"))[:8]:
        try:
            with path.open("rb") as handle:
                first = orjson.loads(handle.readline())
        except (OSError, orjson.JSONDecodeError):
            continue
        if isinstance(first, dict) and isinstance(first.get("run_id"), str):
            return str(first["run_id"])
    return None


def write_launch_ended(
    log_dir: str | Path, *, run_id: str, node_rank: int, world_size: int, record: records.LaunchEnded
) -> Path | str:
    """Append `record` to the node's launcher file, continuing its chain; the path, or why not."""
    path = launcher_path(log_dir, node_rank)
    seq, prev = 0, GENESIS
    if path.exists():
        last = _last_of_ours(path)
        if last is None:
            return f"{path} holds something else than launch_ended records: left as it is"
        seq, prev = last
    body: dict[str, JSONValue] = {
        **{k: v for k, v in msgspec.to_builtins(record).items() if k not in _ENVELOPE},
        "event": "launch_ended",
        "ts": time.time(),
        "seq": seq,
        "run_id": run_id,
        "rank": node_rank,
        "world_size": world_size,
        "generation": 0,
        "prev_hash": prev,
    }
    digest = record_hash(body)
    line = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)[:-1] + b',"hash":"' + digest.encode() + b'"}\n'
    fd = os.open(path, _WRITE, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def _last_of_ours(path: Path) -> tuple[int, str] | None:
    """(next seq, last hash) of a launcher file whose every line is a launch_ended record of one
    chain; None for anything else."""
    data = path.read_bytes()[: 1 << 20]
    seq, prev = 0, GENESIS
    if data and not data.endswith(b"\n"):
        return None
    for line in data.splitlines():
        try:
            rec = orjson.loads(line)
            link = msgspec.convert(rec, _Link)
        except (orjson.JSONDecodeError, msgspec.ValidationError):  # not JSON, not an object, a field of another type
            return None
        digest = link.hash
        if (
            link.event != "launch_ended"
            or link.seq != seq
            or link.prev_hash != prev
            or digest is None
            or not line_hash_matches(line, rec, digest)
        ):
            return None
        seq, prev = seq + 1, digest
    return seq, prev


class _Link(msgspec.Struct, kw_only=True):
    """A launcher file's record as `_last_of_ours` reads it: its event and its place in the chain
    (None where it lacks one; a `seq` of any number type, compared by value)."""

    event: str | None = None
    seq: int | float | bool | None = None
    hash: str | None = None
    prev_hash: str | None = None


def host() -> str:
    return socket.gethostname()
