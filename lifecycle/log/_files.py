"""The log directory: whether it can hold a log, which run's logs it already holds, and where an
existing rank file's chain ends (so a new attempt of the same run continues it).

A file is one of our logs only when it is a regular file with one link (never a symbolic link) whose
first line is a `lifecycle_started` record naming a run. Anything else under a rank file's name is
refused, never truncated, rewritten, removed or followed.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import orjson

from lifecycle.log._chain import GENESIS
from lifecycle.log._values import JSONValue

EXISTING_POLICIES = ("refuse", "overwrite", "append")
_STARTED = b'"event":"lifecycle_started"'
_LEAVE = "move it out of the log directory, or choose another log directory"


def rank_file(log_dir: Path, rank: int) -> Path:
    return log_dir / f"rank-{rank:05d}.jsonl"


def check_log_dir(log_dir: Path) -> str | None:
    """Why `log_dir` cannot hold the startup log, or None when it can. Pure: creates nothing."""
    if log_dir.is_symlink():
        return (
            f"log_dir {str(log_dir)!r} is a symbolic link (to {os.readlink(log_dir)!r}): the startup log "
            "never follows links; pass the real directory path"
        )
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


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainEnd:
    """Where an existing rank file's hash chain ends, and how many attempts it holds. `ident`
    (device, inode) is the file that was checked: the writer opens that one or none."""

    seq: int = 0
    prev: str = GENESIS
    attempts: int = 0
    truncated: int = 0
    complete: int = 0
    run_id: str | None = None
    ident: tuple[int, int] | None = None
    chained: bool = True

    def unchained_problem(self, path: Path) -> str | None:
        """Why a new attempt cannot continue this file (its last line is not a chained record)."""
        if self.chained:
            return None
        return (
            f"log_dir {str(path.parent)!r}: {path.name} does not end with a hash-chained record, so a new "
            f"attempt cannot continue it: {_LEAVE}, or set logging.existing to 'overwrite' to replace it"
        )


def _not_ours(path: Path, why: str) -> str:
    return f"log_dir {str(path.parent)!r}: {path.name} {why}, so it is not one of our startup logs: {_LEAVE}"


def _read_checked(path: Path) -> tuple[os.stat_result, bytes] | str | None:
    """The file's status and bytes, read without following a link; None when absent; why not ours."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return _not_ours(path, f"is a symbolic link (to {os.readlink(path)!r}); the startup log never follows links")
    if not stat.S_ISREG(st.st_mode):
        return _not_ours(path, "is not a regular file")
    if st.st_nlink > 1:
        return _not_ours(path, f"has {st.st_nlink} hard links (another name shares its content)")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        return _not_ours(path, f"cannot be read ({exc.strerror})")
    try:
        with os.fdopen(fd, "rb") as handle:
            return os.fstat(handle.fileno()), handle.read()
    except OSError as exc:
        return _not_ours(path, f"cannot be read ({exc.strerror})")


def _record(line: bytes) -> dict[str, JSONValue] | None:
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def inspect_log(path: Path) -> ChainEnd | str | None:
    """Where `path`'s chain ends when it is one of our logs; None when there is no such file; else
    why it is not ours (a link, not a regular file, not a startup log). Reads only; follows nothing."""
    read = _read_checked(path)
    if read is None or isinstance(read, str):
        return read
    st, data = read
    ident = (st.st_dev, st.st_ino)
    if not data:
        return ChainEnd(ident=ident)
    first = _record(data.split(b"\n", 1)[0])
    if first is None or first.get("event") != "lifecycle_started" or not isinstance(first.get("run_id"), str):
        return _not_ours(path, "does not start with a lifecycle_started record")
    complete = data[: data.rfind(b"\n") + 1]
    lines = [line for line in complete.split(b"\n") if line.strip()]
    run_id = str(first["run_id"])
    if not lines:  # not even the first line was finished: it is cut, and the chain starts afresh
        return ChainEnd(truncated=len(data), run_id=run_id, ident=ident)
    last = _record(lines[-1]) or {}
    seq, digest = last.get("seq"), last.get("hash")
    if not isinstance(seq, int) or not isinstance(digest, str):  # replaceable, not continuable
        return ChainEnd(complete=len(complete), run_id=run_id, ident=ident, chained=False)
    return ChainEnd(
        seq=seq + 1,
        prev=digest,
        attempts=sum(1 for line in lines if _STARTED in line),
        truncated=len(data) - len(complete),
        complete=len(complete),
        run_id=run_id,
        ident=ident,
    )


def first_run_id(path: Path) -> str | None:
    """The run id of the first record in `path`, or None when it is not one of our logs."""
    end = inspect_log(path)
    return end.run_id if isinstance(end, ChainEnd) else None


def other_run(log_dir: Path, rank: int, run_id: str) -> tuple[str, Path] | None:
    """(run id, file) of logs of another run in `log_dir` — this rank's file and rank 0's are
    looked at (two opens per rank, whatever the world size) — or None."""
    for path in dict.fromkeys((rank_file(log_dir, rank), rank_file(log_dir, 0))):
        found = first_run_id(path)
        if found is not None and found != run_id:
            return found, path
    return None


def own_file_problem(log_dir: Path, rank: int, policy: str) -> str | None:
    """Why this rank's file, when there is one, is not one of our logs (so nothing may touch it), or
    cannot be continued under `policy`."""
    path = rank_file(log_dir, rank)
    end = inspect_log(path)
    if isinstance(end, ChainEnd) and policy != "overwrite":
        return end.unchained_problem(path)
    return end if isinstance(end, str) else None


def existing_policy_problem(log_dir: Path, rank: int, run_id: str, policy: str) -> str | None:
    """Why `log_dir` cannot take this rank's log: `policy` (logging.existing) refuses another run's
    logs, or its rank file is not one of our logs (any policy) or cannot be continued. None when it
    can."""
    if not log_dir.is_dir():
        return None
    found = other_run(log_dir, rank, run_id) if policy == "refuse" else None
    if found is None:
        return own_file_problem(log_dir, rank, policy)
    other, path = found
    return (
        f"log_dir {str(log_dir)!r} holds the startup logs of another run, {other!r} ({path.name}): "
        "use a new log directory, or set logging.existing to 'overwrite' (`lifecycle run --overwrite`) "
        "to replace them, or to 'append' to add this run to them (the audit then reports mixed runs)"
    )


def removable_ranks(log_dir: Path, world_size: int) -> list[Path]:
    """Rank files of ranks this run does not have (an older, larger run's) that are checked to be
    our logs: what rank 0 removes when logging.existing is 'overwrite'. Anything else stays."""
    out = []
    for path in sorted(log_dir.glob("rank-*.jsonl")):
        stem = path.name[len("rank-") : -len(".jsonl")]
        if stem.isdigit() and int(stem) >= world_size and isinstance(inspect_log(path), ChainEnd):
            out.append(path)
    return out
