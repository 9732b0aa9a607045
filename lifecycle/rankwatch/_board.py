"""The node-local board of a rank watch (_watch.py): how the ranks of one node talk without the store.

One directory per node and initialization, `<tmp>/megatron-lifecycle-<uid>/<nonce>`, the nonce drawn by
the node's leader and read by the others from its check-in entry. Files:
    beat-<rank>   each rank's: its watcher touches it every poll (its mtime is the rank's heartbeat on
                  this node); its text is the state the rank is in, then its process as
                  `pid:start:machine` (`_liveness.owner`)
    first         the first failure the node learned (the leader posts what it read in the store, or a
                  failure it found on this node): the other ranks of the node read it here, never in the store
    done-<rank>   a rank whose watch stopped (its beat, renamed): its process's end is no loss
Only the node's ranks write here; the last rank to leave removes the directory and what is in it. A board
whose ranks were all killed is removed by a later leader's sweep (`_sweep.py`): its owners are the ranks
with a beat on it (`owners`).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from pathlib import Path

from lifecycle.rankwatch._failure import Failure
from lifecycle.rankwatch._liveness import owner, owner_in

NAME = re.compile(r"[0-9a-f]{16}")
"""A board directory's name: its nonce (`secrets.token_hex(8)`)."""
_FILES = re.compile(r"(beat|done)-\d+|first|\.(beat|first)-\d+\.tmp")


def owners(path: Path, names: list[str]) -> list[str] | None:
    """The owner records of the board at `path` holding `names`: its ranks with a beat on it (a beat
    without one, from before owner records, is ""); None where a name is not a board's."""
    if not all(_FILES.fullmatch(name) for name in names):
        return None
    return [owner_in(path / name, 1) for name in names if name.startswith("beat-")]


def board_root(board_dir: str | None) -> Path:
    """`<board_dir or the temp dir>/megatron-lifecycle-<uid>`, made private to this user (0700)."""
    root = Path(board_dir or tempfile.gettempdir()) / f"megatron-lifecycle-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        root.mkdir(mode=0o700)
    info = root.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PermissionError(f"{root} is not a directory of this user's: remove it, or set a board_dir")
    return root


class Board:
    """This rank's view of its node's board (see the module docstring)."""

    def __init__(self, root: Path, nonce: str, rank: int) -> None:
        self.path = root / nonce
        self.rank = rank
        with contextlib.suppress(FileExistsError):
            self.path.mkdir(mode=0o700)
        self._state: str | None = None
        self._owner = owner()
        self._posted = False
        self.beat("DISTRIBUTED")  # on the board from the start: the last rank out is the last to leave

    def _beat_file(self, rank: int) -> Path:
        return self.path / f"beat-{rank}"

    def beat(self, state: str) -> None:
        """This rank is alive (and in `state`): rewrite the text when the state changed, else touch it."""
        own = self._beat_file(self.rank)
        if state != self._state:
            tmp = self.path / f".beat-{self.rank}.tmp"
            tmp.write_text(f"{state}\n{self._owner}\n")
            tmp.replace(own)
            self._state = state
        else:
            os.utime(own)

    def last_beat(self, rank: int) -> float | None:
        """When `rank`'s watcher last beat (wall clock), or None before its first beat."""
        try:
            return self._beat_file(rank).stat().st_mtime
        except FileNotFoundError:
            return None

    def state_of(self, rank: int) -> str:
        try:
            return self._beat_file(rank).read_text().partition("\n")[0] or "unknown"
        except OSError:
            return "unknown"

    def post(self, failure: Failure) -> None:
        """Make `failure` the node's first, unless one is there already (the first poster wins)."""
        if self._posted:
            return
        tmp = self.path / f".first-{self.rank}.tmp"
        try:
            tmp.write_bytes(failure.encode())
            os.link(tmp, self.path / "first")
        except FileExistsError:
            pass
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
        self._posted = True

    def first(self) -> Failure | None:
        """The node's first failure, or None."""
        try:
            raw = (self.path / "first").read_bytes()
        except FileNotFoundError:
            return None
        return Failure.decode(raw) if raw else None

    def said_done(self, rank: int) -> bool:
        """`rank` left the board as done (its watch stopped: its end is no loss)."""
        return (self.path / f"done-{rank}").exists()

    def leave(self, *, done: bool = True) -> None:
        """Take this rank's beat off the board (`done`: as done); the last rank out removes the board."""
        own = self._beat_file(self.rank)
        with contextlib.suppress(OSError):
            if done:
                own.replace(self.path / f"done-{self.rank}")
            else:
                own.unlink()
        with contextlib.suppress(OSError):
            names = [p.name for p in self.path.iterdir()]
            if not any(name.startswith("beat-") for name in names):
                for name in names:
                    with contextlib.suppress(FileNotFoundError):
                        (self.path / name).unlink()
                self.path.rmdir()
