"""Output files (`export`, `report`, `plot` and `export --follow`): ours or refused, as the log directory's files.

An output path is written only when nothing is there, or when what is there is one of our own
outputs of that kind: a regular file with one link whose first bytes are what we write (`ours`),
or an empty file. A symbolic link, a directory, a hard-linked file or anyone else's file is refused
with the reason and the fix, never followed, truncated or overwritten. A whole file is written to a
temporary file in the same directory and renamed over the path, so a failure (a full disk) leaves
the earlier file as it was; an appended file (`--follow`) is opened without following a link, and
a line that could not be written whole is cut off again.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import zlib
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

_SAMPLE = 4096
_TAIL = 65536
_GZIP = b"\x1f\x8b"

Ours = Callable[[bytes], bool]
"""Whether an existing file is one of our outputs, from its first 4 KiB (gunzipped when gzipped)
followed by its last 64 KiB (where a PDF keeps its metadata)."""


def _refused(why: str, code: int = errno.EEXIST) -> OSError:
    return OSError(code, f"{why}; an output is never followed, nor replaced unless we wrote it: {_FIX}")


_FIX = "remove it or choose another path"


def _sample(fd: int, size: int) -> bytes:
    head = os.pread(fd, _SAMPLE, 0)
    if head.startswith(_GZIP):
        try:
            return zlib.decompressobj(wbits=31).decompress(head, _SAMPLE)
        except zlib.error:
            return b""
    return head + os.pread(fd, _TAIL, max(size - _TAIL, len(head))) if size > len(head) else head


def _check(path: Path, ours: Ours) -> os.stat_result | None:
    """The existing output's status when it may be replaced or appended to; None when there is none.
    Raises OSError (one line: why, and the fix) when it is not ours."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise _refused(f"is a symbolic link (to {os.readlink(path)!r})", errno.ELOOP)
    if stat.S_ISDIR(st.st_mode):
        raise OSError(errno.EISDIR, "is a directory: give a file path")
    if not stat.S_ISREG(st.st_mode):
        raise _refused("is not a regular file")
    if st.st_nlink > 1:
        raise _refused(f"has {st.st_nlink} hard links (another name shares its content)")
    if st.st_size == 0:
        return st
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        if not ours(_sample(fd, st.st_size)):
            raise _refused("exists and is not an output we wrote")
    finally:
        os.close(fd)
    return st


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_output(output: str | Path, data: bytes, *, ours: Ours) -> Path:
    """Write `data` to `output` whole or not at all: to a temporary file beside it, then renamed
    over it. Raises OSError (its `strerror` one line) when `output` is not ours to replace or the
    write fails; the earlier file is then as it was."""
    path = Path(output)
    existing = _check(path, ours)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
            if existing is not None:
                os.fchmod(fd, stat.S_IMODE(existing.st_mode))
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


class Appender:
    """An output appended to line by line (`export --follow`): each `write` is whole or cut off again."""

    def __init__(self, output: str | Path, *, ours: Ours) -> None:
        self.path = path = Path(output)
        self.created = _check(path, ours) is None
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        st = os.fstat(self.fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:  # replaced since the check
            os.close(self.fd)
            raise _refused("changed while it was opened (not one regular file)")

    def write(self, data: bytes) -> None:
        size = os.lseek(self.fd, 0, os.SEEK_END)
        try:
            _write_all(self.fd, data)
        except OSError:
            os.ftruncate(self.fd, size)
            raise

    def close(self, *, failed: bool = False) -> None:
        """Close it; after a failure, a file this made and left empty is removed again."""
        try:
            st = os.fstat(self.fd)
            if failed and self.created and st.st_size == 0 and os.path.samestat(st, os.lstat(self.path)):
                os.unlink(self.path)
        finally:
            os.close(self.fd)

    def __enter__(self) -> Appender:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close(failed=kind is not None)
