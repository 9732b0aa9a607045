"""Where startup time went: blame (time per state), the critical chain, and straggler ranks.

A state's time on a rank is its entry work: from `transition_started` to `transition_completed`
of the transition that entered it, summed over generations and rebuilds, less the time the rank
waited there for the heavy imports: those are a row of their own, `imports`.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from lifecycle.audit._rank import RankAudit


@dataclass(frozen=True, slots=True, kw_only=True)
class StateBlame:
    """One state across ranks: median, 90th percentile and max entry time, and the slowest rank."""

    state: str
    ranks: int
    median: float
    p90: float
    max: float
    slowest_rank: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RankBlame:
    rank: int
    state: str
    duration: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainLink:
    """The last rank to reach `state`: at `at` seconds after the first rank started, after `duration`."""

    state: str
    rank: int
    at: float
    duration: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Straggler:
    rank: int
    state: str
    duration: float
    median: float

    @property
    def factor(self) -> float:
        return self.duration / self.median if self.median > 0 else float("inf")


def per_state(ranks: Sequence[RankAudit]) -> dict[str, dict[int, float]]:
    """state -> {rank: seconds of entry work}."""
    table: dict[str, dict[int, float]] = defaultdict(dict)
    for audit in ranks:
        if audit.rank is None:
            continue
        for seg in audit.segments:
            row = table[seg.state]
            row[audit.rank] = row.get(audit.rank, 0.0) + seg.duration
    return table


def blame(ranks: Sequence[RankAudit]) -> list[StateBlame]:
    """Each state's time across ranks, slowest (by max) first."""
    out = []
    for state, row in per_state(ranks).items():
        values = sorted(row.values())
        slowest = max(row, key=row.__getitem__)
        out.append(
            StateBlame(
                state=state,
                ranks=len(values),
                median=statistics.median(values),
                p90=_quantile(values, 0.9),
                max=values[-1],
                slowest_rank=slowest,
            )
        )
    return sorted(out, key=lambda b: -b.max)


def rank_blame(ranks: Sequence[RankAudit], top: int = 20) -> list[RankBlame]:
    """The slowest (rank, state) pairs, slowest first."""
    rows = [
        RankBlame(rank=rank, state=state, duration=d)
        for state, row in per_state(ranks).items()
        for rank, d in row.items()
    ]
    return sorted(rows, key=lambda r: -r.duration)[:top]


def critical_chain(ranks: Sequence[RankAudit]) -> list[ChainLink]:
    """For each state in the order first reached, the rank that reached it last (first time)."""
    starts = [a.first_ts for a in ranks if a.first_ts is not None]
    if not starts:
        return []
    t0 = min(starts)
    latest: dict[str, tuple[float, int, float]] = {}
    order: dict[str, float] = {}
    for audit in ranks:
        seen: set[str] = set()
        for seg in audit.segments:
            if seg.state in seen or audit.rank is None:
                continue
            seen.add(seg.state)
            order[seg.state] = min(order.get(seg.state, seg.end), seg.end)
            held = latest.get(seg.state)
            if held is None or seg.end > held[0]:
                latest[seg.state] = (seg.end, audit.rank, seg.duration)
    chain = [
        ChainLink(state=s, rank=latest[s][1], at=max(0.0, latest[s][0] - t0), duration=latest[s][2])
        for s in sorted(latest, key=order.__getitem__)
    ]
    return chain


def stragglers(ranks: Sequence[RankAudit], *, factor: float = 3.0, min_excess_s: float = 0.05) -> list[Straggler]:
    """Ranks whose time in a state is over `factor` x the median and `min_excess_s` above it."""
    found = []
    for state, row in per_state(ranks).items():
        if len(row) < 3:
            continue
        median = statistics.median(row.values())
        for rank, duration in row.items():
            if duration > factor * median and duration - median > min_excess_s:
                found.append(Straggler(rank=rank, state=state, duration=duration, median=median))
    return sorted(found, key=lambda s: -(s.duration - s.median))


def _quantile(values: Sequence[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    pos = q * (len(values) - 1)
    low = int(pos)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (pos - low)
