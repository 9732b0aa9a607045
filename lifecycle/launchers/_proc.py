"""A process as Linux's /proc/<pid>/stat describes it: the one reader of that file (proc(5)).

The second field, the executable's name (`comm`), is in parentheses and may hold any byte a process
chose (`prctl(PR_SET_NAME)`), spaces and parentheses included: the fields after it start after the
line's last `)`.
"""

from __future__ import annotations

from typing import NamedTuple

ENDED = frozenset({"Z", "X", "x"})
"""The states of a process that ended and waits to be reaped (a zombie) or is being removed (dead)."""


class ProcStat(NamedTuple):
    """The fields of /proc/<pid>/stat the project reads (proc(5) fields 1 to 5 and 22)."""

    pid: int
    comm: str
    """The executable's name as the process set it (at most 15 bytes), undecodable bytes replaced."""
    state: str
    """R, S, D, T, t, Z (ended, not yet reaped by its parent), X (dead), ..."""
    ppid: int
    pgrp: int
    starttime: int
    """When the process started, in clock ticks after boot: with the pid, it names one process even
    after its pid is reused."""

    @property
    def ended(self) -> bool:
        """The process ended: a zombie its parent has not reaped, or one being removed."""
        return self.state in ENDED


def proc_stat(pid: int) -> ProcStat | None:
    """`pid`'s /proc/<pid>/stat, parsed; None where no such process exists, or its file cannot be read
    (no /proc: not Linux) or parsed."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            raw = file.read()
    except OSError:
        return None
    head, close, tail = raw.rpartition(b")")
    number, open_, comm = head.partition(b" (")
    fields = tail.split()
    if not close or not open_ or len(fields) < 20:
        return None
    try:
        return ProcStat(
            pid=int(number),
            comm=comm.decode(errors="replace"),
            state=fields[0].decode(errors="replace"),
            ppid=int(fields[1]),
            pgrp=int(fields[2]),
            starttime=int(fields[19]),
        )
    except ValueError:
        return None
