"""Where the ranks of one node meet before the store (_rank_checkin.py, _checkin.py): the first to arrive checks
them all in, so the store's host sees a few operations a node, not a few a rank.

One directory per launch on a node, `<tmp>/megatron-lifecycle-<uid>/checkin-<key>`, the key the same for
every rank of one launch on this node and different for any other (`launch_key`: the world, the node,
the generation, the parent process and its start, torchrun's restart count). Files:
    rank-<rank>  each rank's arrival: its process as `pid:start:machine` (`_liveness.owner`)
    lead         the first arrival's `rank:pid:nonce` (`os.link`: the first writer wins); it checks the
                 others in at the store, in batches (`Meeting.due`), and waits at the store for all
    result       what the leader learned (the first post wins): `{"gate": ..., "entries": [...],
                 "nodes": n}`, or `{"failed": "timeout" | "host_lost" | "error", "detail": ...}`
    left-<rank>  a rank done with the meeting; the last one out removes the directory
A meeting whose ranks were all killed is removed by a later leader's sweep (`_sweep.py`): its owners are
the ranks arrived and not left (`owners`).
Ranks of a launch on one node that meet apart (other parents) are two groups: each checks in its own ranks.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import time
from collections.abc import Mapping
from pathlib import Path

from lifecycle.log import JSONValue
from lifecycle.rankwatch._liveness import owner, owner_in, process_alive, started

Word = dict[str, JSONValue]
"""A meeting's result: the leader's word to the node's ranks, as JSON (`_checkin.joined`, `_checkin.failed`)."""

SETTLE_S = 0.1
"""How long the leader waits for no new arrival before it checks in what arrived (at once when the
launcher's count of the node's ranks arrived): later arrivals go in a later batch."""
LOCAL_SIZE_VARIABLES = ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")


def local_size(environ: Mapping[str, str] | None = None) -> int | None:
    """The ranks on this node as the launcher counts them (torchrun, Open MPI, MPICH), or None."""
    env = os.environ if environ is None else environ
    for name in LOCAL_SIZE_VARIABLES:
        value = env.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None


NAME = re.compile(r"checkin-[0-9a-f]{24}")
"""A meeting directory's name (`launch_key`'s digest)."""
_FILES = re.compile(r"(rank|left)-\d+|lead|result|\.(rank-\d+|lead|result)-\d+\.tmp")


def owners(path: Path, names: list[str]) -> list[str] | None:
    """The owner records of the meeting at `path` holding `names`: each rank arrived and not left, as its
    arrival says (a bare pid before owner records); None where a name is not a meeting's."""
    if not all(_FILES.fullmatch(name) for name in names):
        return None
    left = {name[5:] for name in names if name.startswith("left-")}
    return [owner_in(path / name) for name in names if name.startswith("rank-") and name[5:] not in left]


def launch_key(*parts: str | int, environ: Mapping[str, str] | None = None) -> str:
    """The meeting's name for this launch on this node: `parts` (the world, the node, the generation) with
    the parent process, its start, and torchrun's restart count."""
    env = os.environ if environ is None else environ
    parent = os.getppid()
    whole = [*map(str, parts), str(parent), started(parent), env.get("TORCHELASTIC_RESTART_COUNT", "")]
    return hashlib.sha256("\0".join(whole).encode()).hexdigest()[:24]


class Meeting:
    """This rank's arrival at its node's meeting (see the module)."""

    def __init__(self, root: Path, key: str, rank: int, size: int | None = None) -> None:
        self.path, self.rank, self.size = root / f"checkin-{key}", rank, size
        with contextlib.suppress(FileExistsError):
            self.path.mkdir(mode=0o700)
        self._write(f"rank-{rank}", owner().encode(), replace=True)
        self._write("lead", f"{rank}:{os.getpid()}:{secrets.token_hex(8)}".encode(), replace=False)
        lead = (self.path / "lead").read_text().split(":")
        self.leader, self.leader_pid, self.nonce = int(lead[0]), int(lead[1]), lead[2]
        self.pushed: set[int] = set()
        self._seen: tuple[int, float] = (0, time.monotonic())

    @property
    def leads(self) -> bool:
        return self.leader == self.rank

    def _write(self, name: str, data: bytes, *, replace: bool) -> None:
        tmp = self.path / f".{name}-{self.rank}.tmp"
        tmp.write_bytes(data)
        try:
            if replace:
                tmp.replace(self.path / name)
            else:
                os.link(tmp, self.path / name)
        except FileExistsError:
            pass
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()

    def arrived(self) -> dict[int, int]:
        """rank -> pid of every rank arrived here so far."""
        out: dict[int, int] = {}
        for name in os.listdir(self.path):
            if name.startswith("rank-") and name[5:].isdigit():
                with contextlib.suppress(OSError, ValueError):
                    out[int(name[5:])] = int((self.path / name).read_text().partition(":")[0])
        return out

    def due(self, now: float) -> dict[int, int]:
        """The leader's next batch: the arrived ranks not checked in yet, once every rank the launcher
        counts arrived or none arrived for SETTLE_S; else nothing yet."""
        here = self.arrived()
        if len(here) != self._seen[0]:
            self._seen = (len(here), now)
        new = {rank: pid for rank, pid in here.items() if rank not in self.pushed}
        complete = self.size is not None and len(here) >= self.size
        if new and (complete or now - self._seen[1] >= SETTLE_S):
            return dict(sorted(new.items(), key=lambda item: item[0] != self.rank))  # the leader first
        return {}

    def post(self, result: Word) -> None:
        """The leader's word to the node's ranks (the first post stays)."""
        self._write("result", json.dumps(result).encode(), replace=False)

    def result(self) -> Word | None:
        try:
            raw = (self.path / "result").read_bytes()
        except FileNotFoundError:
            return None
        value = json.loads(raw)
        return value if isinstance(value, dict) else None

    def await_result(self, timeout_s: float) -> Word:
        """The leader's result, polled (1 ms at first, doubling to 50 ms); `{"failed": "leader_gone"}` when
        the leader's process is gone first, `{"failed": "silent"}` after `timeout_s`."""
        deadline, pause = time.monotonic() + timeout_s, 0.001
        while (result := self.result()) is None:
            if not process_alive(self.leader_pid):
                return self.result() or {"failed": "leader_gone"}
            if time.monotonic() >= deadline:
                return {"failed": "silent"}
            time.sleep(pause)
            pause = min(2 * pause, 0.05)
        return result

    def leave(self) -> None:
        """Done with the meeting; the last rank out removes it."""
        with contextlib.suppress(OSError):
            (self.path / f"left-{self.rank}").touch()
            names = os.listdir(self.path)
            if sum(n.startswith("left-") for n in names) < sum(n.startswith("rank-") for n in names):
                return
            for name in names:
                with contextlib.suppress(FileNotFoundError):
                    (self.path / name).unlink()
            self.path.rmdir()
