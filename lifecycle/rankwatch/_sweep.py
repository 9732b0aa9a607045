"""The sweep of a node's lifecycle root (_board.py, _meeting.py): the boards and meetings whose ranks were all
killed (SIGKILL, the OOM killer, a scheduler's kill) and so left them, removed by a later leader on the node.

A rank removes nothing of a directory unless the lifecycle made all of it: a board's or meeting's name, in
the root `board_root` makes (this user's, 0700, no link), itself a directory of this user's (no link)
holding only plain files of the names its kind makes. It is removed when every owner record in it names a
process surely gone (`_liveness.owner_gone`: no such pid, a zombie, or a pid reused by a later process);
one owner that may be alive (running, on another machine or pid namespace, or unreadable) keeps it. A
directory with no owner record at all (being made, or left as its last rank removed it) is removed only
`QUIET_S` after its last change. A sweep that fails (permissions, another sweeper first) does nothing more
and says nothing.

Cost, per node and initialization (the node's first rank: its meeting's leader, else its board's): reading
at most `LIST_MAX` names of the root (one directory scan), and at most `JUDGE_MAX` directories judged, each
one scan, a read of its owner files and of /proc/<pid>/stat for each, stopping at the first owner that may
be alive; no store operation.
"""

from __future__ import annotations

import os
import random
import stat
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from re import Pattern

from lifecycle.rankwatch import _board, _meeting
from lifecycle.rankwatch._liveness import owner_gone

LIST_MAX = 1024
"""Names of the root a sweep reads at most: a root of 100,000 leftovers costs a startup no more."""
JUDGE_MAX = 16
"""Directories a sweep judges at most, drawn at random from the names read (a killed job leaves about two)."""
FILES_MAX = 1024
"""Files a directory may hold to be judged: more and it is kept (no board or meeting holds that many)."""
QUIET_S = 60.0
"""How long a directory with no owner record stays after its last change: a rank that made it writes its
record within a few microseconds, so one this quiet was left by a rank killed in between."""

Owners = Callable[[Path, list[str]], "list[str] | None"]
KINDS: tuple[tuple[Pattern[str], Owners], ...] = ((_board.NAME, _board.owners), (_meeting.NAME, _meeting.owners))


def sweep(root: Path, *, list_max: int = LIST_MAX, judge_max: int = JUDGE_MAX) -> int:
    """Remove the leftovers of killed ranks in `root` (see the module): how many directories went."""
    try:
        info = root.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            return 0
        found = _candidates(root, list_max)
    except OSError:
        return 0
    removed = 0
    for path, owners in random.sample(found, min(judge_max, len(found))):
        with suppress(OSError):
            removed += _remove_if_left(path, owners)
    return removed


def _candidates(root: Path, list_max: int) -> list[tuple[Path, Owners]]:
    """The first `list_max` names of `root` that are directories (no link) named as a kind's, with its owners."""
    out: list[tuple[Path, Owners]] = []
    with os.scandir(root) as entries:
        for n, entry in enumerate(entries):
            if n >= list_max:
                break
            kind = next((owners for name, owners in KINDS if name.fullmatch(entry.name)), None)
            if kind is not None and entry.is_dir(follow_symlinks=False):
                out.append((Path(entry.path), kind))
    return out


def _remove_if_left(path: Path, owners: Owners) -> int:
    """Remove the directory `path` when every owner in it is gone (see the module): 1 if it went, else 0."""
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        return 0
    names: list[str] = []
    with os.scandir(path) as entries:
        for entry in entries:
            if len(names) >= FILES_MAX or not entry.is_file(follow_symlinks=False):
                return 0
            names.append(entry.name)
    records = owners(path, names)
    if records is None:
        return 0
    if not records and time.time() - info.st_mtime < QUIET_S:
        return 0
    if not all(owner_gone(record) for record in records):
        return 0
    for name in names:
        with suppress(FileNotFoundError):
            (path / name).unlink()
    path.rmdir()
    return 1
