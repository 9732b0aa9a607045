"""The log directory: whether it can hold a log, which run's logs it already holds, and where an
existing rank file's chain ends (so a new attempt of the same run continues it)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import orjson

from lifecycle.log._chain import GENESIS

EXISTING_POLICIES = ("refuse", "overwrite", "append")
_STARTED = b'"event":"lifecycle_started"'


def rank_file(log_dir: Path, rank: int) -> Path:
    return log_dir / f"rank-{rank:05d}.jsonl"


def check_log_dir(log_dir: Path) -> str | None:
    """Why `log_dir` cannot hold the startup log, or None when it can. Pure: creates nothing."""
    if log_dir.exists():
        if not log_dir.is_dir():
            return f"log_dir {str(log_dir)!r} exists and is not a directory: choose a directory path"
        if not os.access(log_dir, os.W_OK | os.X_OK):
            return f"log_dir {str(log_dir)!r} is not writable: choose a writable directory"
        return None
    parent = log_dir.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        return f"log_dir {str(log_dir)!r} cannot be created under {str(parent)!r}: choose a writable location"
    return None


def first_run_id(path: Path) -> str | None:
    """The run id of the first record in `path`, or None when there is no readable first record."""
    try:
        with open(path, "rb") as handle:
            line = handle.readline(1 << 20)
        record = orjson.loads(line)
    except (OSError, orjson.JSONDecodeError):
        return None
    run_id = record.get("run_id") if isinstance(record, dict) else None
    return run_id if isinstance(run_id, str) else None


def other_run(log_dir: Path, rank: int, run_id: str) -> tuple[str, Path] | None:
    """(run id, file) of logs of another run in `log_dir` — this rank's file and rank 0's are
    looked at (two opens per rank, whatever the world size) — or None."""
    for path in dict.fromkeys((rank_file(log_dir, rank), rank_file(log_dir, 0))):
        found = first_run_id(path) if path.is_file() else None
        if found is not None and found != run_id:
            return found, path
    return None


def existing_policy_problem(log_dir: Path, rank: int, run_id: str, policy: str) -> str | None:
    """Why `policy` (logging.existing) refuses `log_dir`, or None."""
    if policy != "refuse" or not log_dir.is_dir():
        return None
    found = other_run(log_dir, rank, run_id)
    if found is None:
        return None
    other, path = found
    return (f"log_dir {str(log_dir)!r} holds the startup logs of another run, {other!r} ({path.name}): "
            "use a new log directory, or set logging.existing to 'overwrite' (`lifecycle run --overwrite`) "
            "to replace them, or to 'append' to add this run to them (the audit then reports mixed runs)")


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainEnd:
    """Where an existing rank file's hash chain ends, and how many attempts it holds."""

    seq: int = 0
    prev: str = GENESIS
    attempts: int = 0
    truncated: int = 0


def chain_end(path: Path) -> ChainEnd:
    """Read `path` to its last complete record; cut off a last line left half-written by a killed
    writer (its length is reported as `truncated`) so the next record continues the chain."""
    if not path.is_file():
        return ChainEnd()
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    truncated = len(data) - len(complete)
    if truncated:
        os.truncate(path, len(complete))
    lines = [line for line in complete.split(b"\n") if line.strip()]
    if not lines:
        return ChainEnd(truncated=truncated)
    last = orjson.loads(lines[-1])
    return ChainEnd(seq=int(last["seq"]) + 1, prev=str(last["hash"]),
                    attempts=sum(1 for line in lines if _STARTED in line), truncated=truncated)


def remove_other_ranks(log_dir: Path, world_size: int) -> list[str]:
    """Rank files of ranks this run does not have (an older, larger run's), removed by rank 0 when
    logging.existing is 'overwrite'."""
    removed = []
    for path in sorted(log_dir.glob("rank-*.jsonl")):
        stem = path.name[len("rank-"):-len(".jsonl")]
        if stem.isdigit() and int(stem) >= world_size:
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed
