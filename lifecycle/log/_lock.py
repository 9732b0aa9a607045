"""One run owns a log directory at a time: every rank of the run holds a shared `flock` on
`<log_dir>/.lifecycle.lock`, which names the run, its host and pid. A rank of another run finds the
lock held by a different run and is refused with that run's id and host. The check-and-claim is
serialized by a brief exclusive `flock` on the directory itself. Locks end with the process, so a
killed run never leaves the directory locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import stat
from pathlib import Path

import orjson

from lifecycle.log._values import JSONValue

LOCK_NAME = ".lifecycle.lock"


def _owner(fd: int) -> dict[str, JSONValue]:
    try:
        data = os.pread(fd, 4096, 0)
        owner = orjson.loads(data) if data else {}
    except (OSError, orjson.JSONDecodeError):
        return {}
    return owner if isinstance(owner, dict) else {}


def _held_by(log_dir: Path, owner: dict[str, JSONValue]) -> str:
    return (
        f"log_dir {str(log_dir)!r} is in use by run {owner.get('run_id')!r} on host {owner.get('host')!r} "
        f"(pid {owner.get('pid')!r}; {LOCK_NAME}): two runs cannot write one log directory at once; wait "
        "for that run to end, or choose another log directory"
    )


def _claim(log_dir: Path, fd: int, run_id: str) -> str | None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return f"log_dir {str(log_dir)!r}: {LOCK_NAME} is not a regular file: remove it"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = _owner(fd)
        if owner.get("run_id") != run_id:
            return _held_by(log_dir, owner)
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # another rank of this run holds it: share
        return None
    me = orjson.dumps({"run_id": run_id, "host": socket.gethostname(), "pid": os.getpid()})
    os.ftruncate(fd, 0)
    os.pwrite(fd, me + b"\n", 0)
    fcntl.flock(fd, fcntl.LOCK_SH)  # under the directory lock: no other run can slip in between
    return None


def lock_log_dir(log_dir: Path, run_id: str) -> int | str:
    """The descriptor holding this run's share of `log_dir`'s lock (close it to release), or why
    the directory cannot be had (another run holds it, or the lock file is not ours)."""
    dfd = os.open(log_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fcntl.flock(dfd, fcntl.LOCK_EX)  # held for a few system calls only
        try:
            fd = os.open(log_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            return f"log_dir {str(log_dir)!r}: {LOCK_NAME} cannot be opened ({exc.strerror}): remove it"
        try:
            problem = _claim(log_dir, fd, run_id)
        except OSError as exc:
            problem = f"log_dir {str(log_dir)!r}: {LOCK_NAME} cannot be locked ({exc.strerror})"
        if problem is not None:
            os.close(fd)
            return problem
        return fd
    finally:
        with contextlib.suppress(OSError):
            os.close(dfd)  # closing releases the directory lock
