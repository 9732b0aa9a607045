"""The launcher's own evidence: `launch_ended` records (`lifecycle run`, one file per node agent,
`launcher-NNNNN.jsonl`), read beside the ranks' logs for the verdict.

Each file is a hash chain of its own, checked record by record as a rank's is (`seq`, `prev_hash`,
the hash of its bytes); a record of another type, or a line that is not one, makes the file
unreadable, and a chain that does not verify makes it tampered, each naming `file:line`. The last
record of a file is its node's latest launch. Cost: one small file per node (16,384 at 131,072 ranks
on 8-rank nodes), one line each per launch.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import msgspec
import orjson

from lifecycle.audit._records import unreadable
from lifecycle.errors import LogUnreadable
from lifecycle.log import GENESIS, JSONValue, line_hash_matches, records

_MAX_BYTES = 1 << 20
"""A launcher file larger than this is not one (a record a launch: a few hundred bytes)."""
_decode = msgspec.json.Decoder(records.LaunchEnded).decode


@dataclass(frozen=True, slots=True, kw_only=True)
class Ended:
    """One rank whose end torchrun reported: its exit code or the signal that ended it, and when."""

    rank: int
    exitcode: int | None
    signal: str | None
    ts: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Launch:
    """A node agent's latest `launch_ended`: where it is, the launcher's own signal, the ranks' ends
    in the order torchrun observed them (the first first)."""

    source: str
    line: int
    run_id: str
    node_rank: int
    host: str
    exit: int
    signal: str | None
    ended: tuple[Ended, ...]


@dataclass(slots=True)
class LaunchRead:
    """What reading the launcher files gave: the launches, files that cannot be read, chains that do not verify."""

    launches: list[Launch]
    errors: list[LogUnreadable]
    broken: list[str]  # file:line of each file's first record that does not verify


def read_launches(paths: Iterable[str]) -> LaunchRead:
    read = LaunchRead([], [], [])
    for path in paths:
        try:
            _read(path, read)
        except LogUnreadable as exc:
            read.errors.append(exc)
        except OSError as exc:
            read.errors.append(unreadable(path, None, f"cannot read: {exc.strerror or exc}"))
    return read


def _read(path: str, read: LaunchRead) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        data = os.read(fd, _MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > _MAX_BYTES:
        raise unreadable(path, None, f"more than {_MAX_BYTES} bytes: not a launcher record file")
    prev, last = GENESIS, None
    for lineno, line in enumerate(data.splitlines(), 1):
        try:
            raw = orjson.loads(line)
            rec = _decode(line)
        except (orjson.JSONDecodeError, msgspec.DecodeError) as exc:
            raise unreadable(path, lineno, f"not a launch_ended record ({str(exc)[:120]})") from None
        if rec.seq != lineno - 1 or rec.prev_hash != prev or not line_hash_matches(line, raw, rec.hash):
            read.broken.append(f"{path}:{lineno}")
            return
        prev, last = rec.hash, (lineno, rec)
    if last is not None:
        read.launches.append(_launch(path, *last))


def _launch(path: str, line: int, rec: records.LaunchEnded) -> Launch:
    return Launch(
        source=path,
        line=line,
        run_id=rec.run_id,
        node_rank=rec.node_rank,
        host=rec.host,
        exit=rec.exit,
        signal=rec.signal,
        ended=tuple(e for e in map(_ended, rec.ended[:64]) if e is not None),
    )


def _ended(entry: dict[str, object]) -> Ended | None:
    rank, code, signal, ts = (entry.get(k) for k in ("rank", "exitcode", "signal", "ts"))
    if type(rank) is not int:
        return None
    return Ended(
        rank=rank,
        exitcode=code if type(code) is int else None,
        signal=signal[:16] if isinstance(signal, str) else None,
        ts=float(ts) if type(ts) in (int, float) else None,  # type: ignore[arg-type]  # checked: a number
    )


def of_run(launches: Sequence[Launch], run_id: str | None) -> list[Launch]:
    return [launch for launch in launches if launch.run_id == run_id]


def first_death(launches: Sequence[Launch]) -> tuple[Launch, Ended] | None:
    """The rank torchrun saw end first, over the nodes (by its time; a node's own order without one)."""
    seen = [
        (e.ts if e.ts is not None else float("inf"), i, launch, e)
        for launch in launches
        for i, e in enumerate(launch.ended)
    ]
    if not seen:
        return None
    _, _, launch, first = min(seen, key=lambda s: (s[0], s[1]))
    return launch, first


def doc(launch: Launch) -> dict[str, JSONValue]:
    """How the verdict's evidence names a launcher record."""
    return {"source": launch.source, "line": launch.line, "node": launch.node_rank, "kind": "launch_ended"}
