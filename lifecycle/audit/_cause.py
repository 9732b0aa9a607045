"""Cause versus victims: which rank's failure started a failed startup, and which ranks failed
because of it (LA018).

The root cause is the earliest failure a rank had on its own — a transition that failed, a log
that stops (the rank died), a state that timed out — by timestamp, ties broken by that order and
then by rank (a timeout in the first step after a group made while training: a rank in that group's
first). A `startup_aborted` (a signal: the launcher stopping the others), a `peer_failed` or an
in-process restart wrapper's request (RankShouldRestart) is never the cause while some rank failed on
its own. Without one, the rank a `restarts_exhausted` names (`cause_rank`) is the cause, else the rank
a `peer_failed` names. The rest are its victims.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from lifecycle.audit._cross import ranges
from lifecycle.audit._rank import RankAudit
from lifecycle.audit._records import CAUSE_KINDS, EXHAUSTED, Failure, Finding
from lifecycle.audit._rules import RuleId


@dataclass(frozen=True, slots=True, kw_only=True)
class Victim:
    """A rank that failed after the root cause: `kind` and `message` of its own first failure."""

    rank: int
    kind: str
    message: str
    signal: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RootCause:
    """The failure that started a run's failed startup. `rank` is None when no rank failed on its
    own (every failure a signal: the job was stopped from outside); `kind` is a Failure kind, or
    `peer` (only a peer_failed names it) or `signal`. `at`: seconds after the run's first record."""

    run_id: str | None
    rank: int | None
    kind: str
    message: str
    source: str | None
    line: int | None
    at: float | None
    victims: tuple[Victim, ...]

    def finding(self) -> Finding:
        if self.rank is None:
            text = f"{self.message}{victim_summary(self.victims)}"
        else:
            when = f" (+{self.at:.3f}s after the first record)" if self.at is not None else ""
            text = f"root cause{when}: {self.message}{victim_summary(self.victims)}"
        return Finding(
            rule=RuleId.ROOT_CAUSE, run_id=self.run_id, rank=self.rank, source=self.source, line=self.line, message=text
        )


def victim_summary(victims: Sequence[Victim]) -> str:
    if not victims:
        return ""
    groups: dict[str, list[int]] = defaultdict(list)
    for victim in victims:
        groups[_label(victim)].append(victim.rank)
    return "; victims: " + "; ".join(f"{label} on ranks {ranges(ranks)}" for label, ranks in groups.items())


def _label(victim: Victim) -> str:
    if victim.kind == "aborted":
        return f"stopped by {victim.signal or 'a signal'}"
    if victim.kind == "peer_failed":
        return "stopped by a peer's failure"
    if victim.kind == "restart":
        return "told to restart by the in-process restart wrapper (a peer failed)"
    if victim.kind == EXHAUSTED:
        return "in-process restart gave up"
    return {"failed": "failed later", "died": "died later", "timeout": "timed out"}.get(victim.kind, victim.kind)


def root_causes(streams: Sequence[RankAudit]) -> list[RootCause]:
    """One RootCause per run in which some rank's startup failed."""
    runs: dict[str | None, list[RankAudit]] = defaultdict(list)
    for stream in streams:
        if stream.records and stream.rank is not None:
            runs[stream.run_id].append(stream)
    found = []
    for run_id, group in runs.items():
        failed = [(s, s.failure) for s in group if s.failure is not None]
        if failed:
            found.append(_cause(run_id, group, failed))
    return found


def _cause(run_id: str | None, group: list[RankAudit], failed: list[tuple[RankAudit, Failure]]) -> RootCause:
    t0 = min((s.first_ts for s in group if s.first_ts is not None), default=None)
    own = [(s, f) for s, f in failed if f.kind in CAUSE_KINDS]
    if own:
        stream, failure = _first_own(own)
        skipper = _skipper(failed, failure)
        if skipper is not None:
            return _skipped(run_id, t0, failed, skipper, (stream, failure))
        return RootCause(
            run_id=run_id,
            rank=stream.rank,
            kind=failure.kind,
            message=_what(failure),
            source=stream.source,
            line=failure.line,
            at=None if failure.ts is None or t0 is None else max(0.0, failure.ts - t0),
            victims=_victims(failed, stream),
        )
    exhausted = sorted((f.ts or 0.0, s.rank or 0, s, f) for s, f in failed if f.kind == EXHAUSTED)
    if exhausted:
        return _exhausted(run_id, group, failed, exhausted[0][3])
    named = sorted((f.ts or 0.0, f.peer, s.rank) for s, f in failed if f.kind == "peer_failed" and f.peer is not None)
    if named:
        return _named_peer(run_id, group, failed, named[0][1], named[0][2])
    signals = sorted({f.signal or "a signal" for _, f in failed})
    return RootCause(
        run_id=run_id,
        rank=None,
        kind="signal",
        source=None,
        line=None,
        at=None,
        message=f"no rank failed on its own: every failed rank was stopped by {' or '.join(signals)} "
        "(the launcher, the scheduler or an operator stopped the job)",
        victims=_victims(failed, None),
    )


def _first_own(own: list[tuple[RankAudit, Failure]]) -> tuple[RankAudit, Failure]:
    """The earliest failure of a rank's own; but a timeout of a rank outside a group made while training
    yields to a timeout, in that group's first step, of a rank in it (LA029: the rank that skipped the
    group's lazy first collective leaves every other waiting, inside the group and beyond it)."""
    first = min(own, key=_order)
    if first[1].kind == "timeout" and not _inside(first[1]):
        inside = [(s, f) for s, f in own if f.kind == "timeout" and _inside(f)]
        return min(inside, key=_order, default=first)
    return first


def _inside(failure: Failure) -> bool:
    """The rank failed in the first step after a group made while training, and is in that group."""
    return failure.new_group is not None and not failure.outside


def _skipper(failed: list[tuple[RankAudit, Failure]], first: Failure) -> tuple[RankAudit, Failure] | None:
    """When the first failure is a timeout outside a group made while training, a rank in that group stopped,
    as a victim, where ranks outside it wait (the same step): it went past the group's first collective, and
    the rest of the group waits in it (LA029). The lowest such rank; None when the records show none."""
    if first.kind != "timeout" or _inside(first) or not first.trigger:
        return None
    inside = [(s, f) for s, f in failed if f.kind not in CAUSE_KINDS and _inside(f) and f.trigger == first.trigger]
    return min(inside, key=lambda item: item[0].rank or 0, default=None)


def _skipped(
    run_id: str | None,
    t0: float | None,
    failed: list[tuple[RankAudit, Failure]],
    skipper: tuple[RankAudit, Failure],
    first: tuple[RankAudit, Failure],
) -> RootCause:
    stream, failure = skipper
    return RootCause(
        run_id=run_id,
        rank=stream.rank,
        kind="timeout",
        message=f"rank {stream.rank}, in group {failure.new_group}, went on to {failure.trigger!r} while the "
        f"group waited in its first collective: rank {first[0].rank}, outside it, waiting there too, "
        f"{_what(first[1])}",
        source=stream.source,
        line=failure.line,
        at=None if first[1].ts is None or t0 is None else max(0.0, first[1].ts - t0),
        victims=_victims(failed, stream),
    )


def _order(item: tuple[RankAudit, Failure]) -> tuple[float, int, int]:
    stream, failure = item
    ts = failure.ts if failure.ts is not None else float("inf")
    return ts, CAUSE_KINDS.index(failure.kind), stream.rank if stream.rank is not None else -1


def _what(failure: Failure) -> str:
    if failure.kind == "died":
        during = f" during {failure.trigger!r}" if failure.trigger else ""
        return f"the rank died: its log stops in state {failure.state}{during}"
    return failure.message


def _named_peer(
    run_id: str | None,
    group: list[RankAudit],
    failed: list[tuple[RankAudit, Failure]],
    peer: int | None,
    witness: int | None,
) -> RootCause:
    """No rank's own log shows it failing, but a peer_failed names one: that one is the cause."""
    logs = [s for s in group if s.rank == peer]
    own = "its own log shows no failure" if logs else "no log of it was given"
    return RootCause(
        run_id=run_id,
        rank=peer,
        kind="peer",
        source=logs[0].source if logs else None,
        line=None,
        at=None,
        message=f"named by rank {witness}'s peer_failed record; {own}",
        victims=_victims(failed, None),
    )


def _exhausted(
    run_id: str | None, group: list[RankAudit], failed: list[tuple[RankAudit, Failure]], said: Failure
) -> RootCause:
    """An in-process restart wrapper gave up, naming the rank that failed first in its last cycle
    (`cause_rank`): that one is the cause, every other failed rank its victim."""
    logs = [s for s in group if s.rank == said.peer]
    return RootCause(
        run_id=run_id,
        rank=said.peer,
        kind=EXHAUSTED,
        source=logs[0].source if logs else None,
        line=None,
        at=None,
        message=said.message,
        victims=_victims(failed, logs[0] if logs else None),
    )


def _victims(failed: list[tuple[RankAudit, Failure]], cause: RankAudit | None) -> tuple[Victim, ...]:
    return tuple(
        sorted(
            (
                Victim(rank=s.rank, kind=f.kind, message=f.message, signal=f.signal)
                for s, f in failed
                if s is not cause and s.rank is not None
            ),
            key=lambda v: v.rank,
        )
    )
