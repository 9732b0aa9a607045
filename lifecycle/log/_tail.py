"""Reading a rank file that is still being written: the complete lines since the last read.

    tail = Tail(path)
    for line in tail.read():  # bytes, one record each; a line still being written waits for the next read
        ...

`lifecycle audit --format verdict --follow` and `lifecycle export --follow` both follow the
per-rank files of a running job this way; a file that cannot be read (not there yet, removed) or
is not a regular file (a FIFO: reading it could block) reads as no new lines.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class Tail:
    """One file followed from its start: `offset` is how far its complete lines were read."""

    __slots__ = ("offset", "path")

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def read(self) -> list[bytes]:
        """The lines completed since the last read (without their newlines); none when the file
        cannot be read."""
        try:
            with open(os.open(self.path, os.O_RDONLY | os.O_NONBLOCK), "rb") as fh:  # a FIFO's open never blocks
                if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                    return []  # a FIFO or a device: not a rank file being written, and never read
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return []
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written is read next time
        self.offset += len(complete)
        return complete.splitlines()
