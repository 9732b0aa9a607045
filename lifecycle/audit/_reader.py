"""Find the logs to audit and stream their lines: files, directories of rank files, or stdin.

A line longer than MAX_LINE is refused without reading it whole; a last line with no newline is
a record cut off by a crash and is reported by the caller, not refused.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from lifecycle.audit._records import unreadable

STDIN = "-"
STDIN_NAME = "<stdin>"
MAX_LINE = 1 << 20
_CHUNK = 8 << 20


def discover(paths: Sequence[str]) -> list[str]:
    """The inputs to read, in order: each file as given, each directory's `rank-*.jsonl` sorted."""
    if not paths:
        raise unreadable("lifecycle audit", None, "no input: give log files, log directories or '-'")
    found: list[str] = []
    for raw in paths:
        if raw == STDIN:
            found.append(STDIN)
            continue
        path = Path(raw)
        if path.is_dir():
            files = sorted(str(p) for p in path.glob("rank-*.jsonl"))
            if not files:
                raise unreadable(raw, None, "no rank-*.jsonl files in this directory: pass the run's log_dir")
            found.extend(files)
        elif path.is_file():
            found.append(raw)
        else:
            raise unreadable(raw, None, "no such file or directory")
    return found


def open_source(name: str) -> tuple[str, BinaryIO]:
    """(display name, binary handle); the caller closes file handles, never stdin."""
    if name == STDIN:
        return STDIN_NAME, sys.stdin.buffer
    return name, open(name, "rb")


class Lines:
    """Iterate (line number, bytes without the newline). Memory stays at one chunk plus one line
    however large the input. `cut` is the number of a last line that had no newline (else 0)."""

    def __init__(self, name: str, handle: BinaryIO) -> None:
        self.name = name
        self.handle = handle
        self.cut = 0

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        size = _size(self.handle)
        if size is None or size > _CHUNK:
            return self._chunks()
        parts = self.handle.read().split(b"\n")
        if not parts[-1]:
            parts.pop()
        else:
            self.cut = len(parts)
        if parts and max(map(len, parts)) > MAX_LINE:
            lineno = next(n for n, p in enumerate(parts, 1) if len(p) > MAX_LINE)
            raise unreadable(self.name, lineno, f"line is over the {MAX_LINE}-byte limit")
        return enumerate(parts, 1)

    def _chunks(self) -> Iterator[tuple[int, bytes]]:
        buf = b""
        pos = 0
        lineno = 0
        while True:
            cut = buf.find(b"\n", pos)
            if cut < 0:
                rest = buf[pos:]
                if len(rest) > MAX_LINE:
                    raise unreadable(self.name, lineno + 1, f"line is over the {MAX_LINE}-byte limit")
                more = self.handle.read(_CHUNK)
                if not more:
                    if rest:
                        self.cut = lineno + 1
                        yield self.cut, rest
                    return
                buf = rest + more if rest else more
                pos = 0
                continue
            lineno += 1
            if cut - pos > MAX_LINE:
                raise unreadable(self.name, lineno, f"line is {cut - pos} bytes, over the {MAX_LINE}-byte limit")
            yield lineno, buf[pos:cut]
            pos = cut + 1


def _size(handle: BinaryIO) -> int | None:
    """The size of a regular file; None for pipes and terminals (read those in chunks)."""
    try:
        info = os.fstat(handle.fileno())
    except (OSError, ValueError):
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None
