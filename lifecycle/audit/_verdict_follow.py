"""`lifecycle audit --format verdict --follow DIR`: the verdict as soon as the first failure is known.

Follows the rank files of a log directory as the ranks write them, feeding each rank's audit the
records completed since the last pass (one read per file a pass, from where the last one stopped).
When any rank's log shows a failure it returns the verdict at once if the root cause is a rank's own
failure (a transition that failed, a timeout; but a timeout outside a group made while training waits up
to `group_wait_s` for the group's ranks to log their stop: one may have gone on past its first
collective). When the culprit is so far only named by its peers (`peer_failed`, written by a victim
before the culprit's own record can be), it waits up to `grace_s` for the culprit's own record, unless
the victim names it lost (`peer_kind` `lost`: gone, or frozen past `stale_s`): such a rank wrote its last
record before it was declared lost, so one more pass over every
file, begun after the pass that found the victim's record, has all of them. It also returns when every rank
of the world shut down (a clean verdict), when a rank shut down and the others have been silent for
`stall_s`, when the launcher's own record (`launch_ended`) of the run is in (after one more read of every
rank file), or when no rank wrote for `idle_timeout_s`: the logs are then judged as they stand, and a
log that stopped short is a rank that died (not one `lifecycle run` started while that launcher left no
record of its end: it was killed, and the verdict is `incomplete`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path

import orjson

from lifecycle.audit._cause import root_causes
from lifecycle.audit._launches import LaunchRead, read_launches
from lifecycle.audit._rank import RankAudit
from lifecycle.audit._records import CAUSE_KINDS, EXHAUSTED, unreadable
from lifecycle.audit._verdict import verdict
from lifecycle.errors import LogUnreadable
from lifecycle.log import JSONValue, Tail


class _Followed:
    """One rank file: how far it was read, and its audit so far."""

    def __init__(self, path: Path) -> None:
        self.tail, self.lineno, self.changed_at = Tail(path), 0, time.monotonic()
        self.audit = RankAudit(str(path))
        self.broken: LogUnreadable | None = None

    def read(self) -> bool:
        """Feed the records completed since the last read; whether there were any."""
        lines = self.tail.read()
        self.changed_at = time.monotonic() if lines else self.changed_at
        for line in lines:
            self.lineno += 1
            if self.broken is not None or not line.strip():
                continue
            try:
                rec = orjson.loads(line)
                self.audit.feed(rec, line, self.lineno)
            except LogUnreadable as exc:
                self.broken = exc  # the verdict names it (`unreadable`), and judges no rank by it
            except (orjson.JSONDecodeError, TypeError, AttributeError) as exc:
                self.broken = unreadable(str(self.tail.path), self.lineno, f"not a record ({str(exc)[:80]})")
        return bool(lines)


def _known(streams: list[RankAudit]) -> str | None:
    """`own`: every failed run's root cause is a rank's own failure; `lost`: each one is that or a rank its
    peers name lost (no record of its own will come); None: a culprit's own record may still come."""
    live = [s for s in streams if s.records and s.rank is not None]
    causes = root_causes(live)
    if not causes:
        return None
    if any(_awaits_group(c.run_id, c.rank, c.kind, live) for c in causes):
        return "group"
    if all(c.kind in CAUSE_KINDS or c.kind == EXHAUSTED for c in causes):  # the wrapper's last word is in
        return "own"
    lost = {(s.run_id, s.failure.peer) for s in live if s.failure is not None and s.failure.peer_lost}
    return "lost" if all(c.kind in CAUSE_KINDS or (c.run_id, c.rank) in lost for c in causes) else None


def _awaits_group(run_id: str | None, rank: int | None, kind: str, live: list[RankAudit]) -> bool:
    """The cause so far is a timeout of a rank outside a group made while training, and a rank in the group
    has not logged its stop yet: it may be the one that went past the group's first collective (`_cause`)."""
    outside = any(s.run_id == run_id and s.rank == rank and s.failure and s.failure.outside for s in live)
    return kind == "timeout" and outside and any(s.run_id == run_id and _unheard_inside(s) for s in live)


def _unheard_inside(stream: RankAudit) -> bool:
    """A rank in a group it made while training (no step since), with no failure and no shutdown logged."""
    fresh, ended = stream.fresh_group, stream.failure is not None or stream.shut
    return fresh is not None and not fresh[2] and fresh[0] == stream.bound_steps and not ended


def _settled(ranks: Iterable[_Followed], now: float, stall_s: float) -> bool:
    """A rank shut down and every other one is done or silent for `stall_s`: the job is over, and a
    log that stopped short is a rank that died (its disk full, its process gone)."""
    followed = list(ranks)
    return any(r.audit.shut for r in followed) and all(
        r.audit.shut or r.audit.failure is not None or now - r.changed_at >= stall_s for r in followed
    )


def follow_verdict(
    log_dir: str | Path,
    *,
    poll_s: float = 0.2,
    grace_s: float = 1.0,
    idle_timeout_s: float = 600.0,
    stall_s: float = 5.0,
    group_wait_s: float = 30.0,
    stop: Callable[[], object] | None = None,
) -> dict[str, JSONValue]:
    """Follow `log_dir` until a failure is known (plus `grace_s`), every rank shut down, nothing was
    written for `idle_timeout_s`, or `stop()` is true; the verdict then."""
    ranks: dict[Path, _Followed] = {}
    last_change, failed_at, reread, launched_seen, finished = time.monotonic(), None, False, False, False
    while True:
        changed = _read_all(log_dir, ranks)
        now = time.monotonic()
        last_change = now if changed else last_change
        streams = [r.audit for r in ranks.values()]
        launched = _launched(log_dir, streams)
        if launched.launches and launched_seen:
            break  # the launcher's record is in, and every rank file was read once more after it
        launched_seen = bool(launched.launches)
        if launched_seen:
            continue  # the launch is over: read every rank file once more, at once
        failed_at = now if failed_at is None and any(s.failure is not None for s in streams) else failed_at
        known = _known(streams) if failed_at is not None else None
        if known == "own" or (known == "lost" and reread):
            break  # the culprit's own record is in, or none will come: nothing more to wait for
        reread = known == "lost"  # the lost rank's file, read before the victim's, may lack its last records
        if reread:
            continue  # so read every file once more, at once
        finished = _finished(streams)
        idle = now - last_change > idle_timeout_s or _settled(ranks.values(), now, stall_s)
        wait_s = group_wait_s if known == "group" else grace_s  # its ranks: stopped by the timeout's publish
        if (failed_at is not None and now - failed_at >= wait_s) or finished or idle or (stop and stop()):
            break
        time.sleep(poll_s)
    if failed_at is None and not finished:
        for stream in streams:  # judged as they stand: a log that stops short is a rank that died
            stream.finish()
    return _judged(log_dir, ranks, streams)


def _finished(streams: list[RankAudit]) -> bool:
    """Every rank of the world, as the records declare it, shut down."""
    world = max((s.world_size or 0 for s in streams), default=0)
    return len(streams) >= world > 0 and all(s.shut for s in streams)


def _read_all(log_dir: str | Path, ranks: dict[Path, _Followed]) -> bool:
    """Read what each rank file gained (a new file is followed from now on): whether any did."""
    changed = False
    for path in sorted(Path(log_dir).glob("rank-*.jsonl")):
        changed |= ranks.setdefault(path, _Followed(path)).read()
    return changed


def _judged(log_dir: str | Path, ranks: dict[Path, _Followed], streams: list[RankAudit]) -> dict[str, JSONValue]:
    live = [s for s in streams if s.records and s.rank is not None]
    errors = [r.broken for r in ranks.values() if r.broken is not None]
    findings = [f for s in live for f in s.findings()]
    return verdict(root_causes(live), live, findings, errors=errors, launches=_launched(log_dir, streams))


def _launched(log_dir: str | Path, streams: list[RankAudit]) -> LaunchRead:
    """The launchers' records of the runs being followed (a launcher file of an earlier run is not this one's end)."""
    runs = {s.run_id for s in streams if s.records}
    read = read_launches(str(p) for p in sorted(Path(log_dir).glob("launcher-*.jsonl")))
    read.launches = [launch for launch in read.launches if launch.run_id in runs]
    return read
