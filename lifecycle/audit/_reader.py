"""Find the logs to audit and read their lines in batches: files, directories of rank files,
pipes and FIFOs given by name (`/dev/fd/N` from `<(zcat ...)`), or stdin.

A line longer than MAX_LINE is refused without reading it whole; a last line with no newline is
a record cut off by a crash and is reported by the caller, not refused.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from lifecycle.audit._records import Finding, unreadable
from lifecycle.audit._rules import RuleId
from lifecycle.errors import LogUnreadable

STDIN = "-"
STDIN_NAME = "<stdin>"
MAX_LINE = 1 << 20
BATCH = 512
"""Lines parsed and checked together: enough to amortize the per-batch work, few enough that the
parsed records of one batch stay small."""
_CHUNK = 8 << 20
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


@dataclass(frozen=True, slots=True)
class Input:
    """One thing to read. `listed`: found in a directory (then anything but a regular file is
    skipped, and never opened in a way that blocks); `stream`: a pipe, FIFO, device or stdin
    named by the user, read in chunks by this process."""

    name: str
    listed: bool = False
    stream: bool = False


@dataclass(frozen=True, slots=True)
class Discovery:
    inputs: tuple[Input, ...]
    errors: tuple[LogUnreadable, ...]
    launchers: tuple[str, ...] = ()
    """`launcher-*.jsonl` files (`lifecycle run`'s own record, one per node agent): read apart from the
    ranks' logs (`_launches.py`)."""


def launcher_file(name: str) -> bool:
    base = os.path.basename(name)
    return base.startswith("launcher-") and base.endswith(".jsonl")


def discover(paths: Sequence[str]) -> Discovery:
    """The inputs to read, in order: each path as given, each directory's `rank-*.jsonl` sorted.
    A path that cannot be used is an error and the others are still read."""
    if not paths:
        return Discovery((), (unreadable("lifecycle audit", None, "no input: give log files, log directories or '-'"),))
    found: list[Input] = []
    errors: list[LogUnreadable] = []
    launchers: list[str] = []
    for raw in paths:
        if raw == STDIN:
            found.append(Input(STDIN, stream=True))
            continue
        try:
            mode = os.stat(raw).st_mode
        except OSError as exc:
            errors.append(unreadable(raw, None, _why(exc)))
            continue
        if not stat.S_ISDIR(mode):
            if launcher_file(raw) and stat.S_ISREG(mode):
                launchers.append(raw)
            else:
                found.append(Input(raw, stream=not stat.S_ISREG(mode)))
            continue
        names = os.listdir(raw)
        files = sorted(
            os.path.join(raw, name) for name in names if name.startswith("rank-") and name.endswith(".jsonl")
        )
        launchers += sorted(os.path.join(raw, name) for name in names if launcher_file(name))
        if not files:
            errors.append(unreadable(raw, None, "no rank-*.jsonl files in this directory: pass the run's log_dir"))
        found.extend(Input(name, listed=True) for name in files)
    return Discovery(tuple(found), tuple(errors), tuple(launchers))


def _why(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such file or directory"
    return f"cannot read: {exc.strerror or exc}"


def file_rank(name: str) -> int | None:
    """The rank a `rank-NNNNN.jsonl` file name gives, or None for any other name."""
    base = os.path.basename(name)
    digits = base[5:-6]
    if base.startswith("rank-") and base.endswith(".jsonl") and digits.isascii() and digits.isdigit():
        return int(digits)
    return None


def open_input(source: Input) -> tuple[Lines | None, Finding | None]:
    """The input's lines, or (None, LA020 finding) for a directory entry that is not a regular
    file. A regular file up to 8 MiB is read whole here; the caller closes the Lines."""
    if source.name == STDIN:
        return Lines(STDIN_NAME, handle=sys.stdin.buffer, owned=False), None
    fd = os.open(source.name, os.O_RDONLY | (_NONBLOCK if source.listed else 0))
    try:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_size <= _CHUNK:
            return Lines(source.name, data=_read_whole(fd, info.st_size)), None
        if stat.S_ISREG(info.st_mode) or not source.listed:  # large files, and pipes named by the user
            handle = open(fd, "rb")  # noqa: SIM115 - owned by the Lines, which the caller closes
            fd = -1
            return Lines(source.name, handle=handle), None
    finally:
        if fd >= 0:
            os.close(fd)
    kind = next((what for test, what in _KINDS if test(info.st_mode)), "not a regular file")
    return None, Finding(
        rule=RuleId.NOT_A_REGULAR_FILE,
        rank=file_rank(source.name),
        source=source.name,
        message=f"{kind} named like a rank log: skipped without reading it (reading it could block the audit "
        "forever); pass it by name to read it as a stream",
    )


def _read_whole(fd: int, size: int) -> bytes:
    data = os.read(fd, size)
    while len(data) < size:  # a short read; a file that shrank meanwhile just ends early
        more = os.read(fd, size - len(data))
        if not more:
            break
        data += more
    return data


class Lines:
    """Batches of (number of the first line, lines without their newline), from bytes read whole
    or from a handle read in 8 MiB chunks: memory stays at one chunk plus one batch however large
    the input. `cut` is the number of a last line that had no newline (else 0); `count` the number
    of lines read; `ascii` whether the bytes the batches now being yielded come from are all ASCII."""

    def __init__(
        self, name: str, *, data: bytes | None = None, handle: BinaryIO | None = None, owned: bool = True
    ) -> None:
        self.name = name
        self.data = data
        self.handle = handle
        self.owned = owned
        self.cut = 0
        self.count = 0
        self.ascii = False

    def __iter__(self) -> Iterator[tuple[int, list[bytes]]]:
        if self.data is not None:
            return self._whole()
        return self._chunks()

    def close(self) -> None:
        self.data = None
        if self.handle is not None and self.owned:
            self.handle.close()

    def _whole(self) -> Iterator[tuple[int, list[bytes]]]:
        size = len(self.data or b"")
        self.ascii = (self.data or b"").isascii()
        parts = (self.data or b"").split(b"\n")
        self.data = None  # the lines hold the bytes now: do not keep them twice
        if not parts[-1]:
            parts.pop()
        else:
            self.cut = len(parts)
        if size > MAX_LINE:
            self._check(parts, 1)
        self.count = len(parts)
        yield from _batches(parts, 1)

    def _chunks(self) -> Iterator[tuple[int, list[bytes]]]:
        handle = self.handle
        rest = b""
        first = 1
        while handle is not None:
            more = handle.read(_CHUNK)
            if not more:
                break
            data = rest + more if rest else more
            self.ascii = data.isascii()
            parts = data.split(b"\n")
            rest = parts.pop()
            if len(rest) > MAX_LINE:
                raise unreadable(self.name, first + len(parts), f"line is over the {MAX_LINE}-byte limit")
            self._check(parts, first)
            self.count += len(parts)
            yield from _batches(parts, first)
            first += len(parts)
        if rest:
            self.cut = first
            self.count += 1
            self.ascii = rest.isascii()
            yield first, [rest]

    def _check(self, parts: list[bytes], first: int) -> None:
        if parts and max(map(len, parts)) > MAX_LINE:
            lineno = next(n for n, p in enumerate(parts, first) if len(p) > MAX_LINE)
            raise unreadable(self.name, lineno, f"line is over the {MAX_LINE}-byte limit")


def _batches(parts: list[bytes], first: int) -> Iterator[tuple[int, list[bytes]]]:
    if len(parts) <= BATCH:
        if parts:
            yield first, parts
        return
    for start in range(0, len(parts), BATCH):
        yield first + start, parts[start : start + BATCH]
