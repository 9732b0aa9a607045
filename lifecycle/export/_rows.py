"""The timeline's rows: one per rank for a small job; for a large one, ranks grouped by how alike
their state timings are, with the outliers (failed or stopped ranks, stragglers, ranks with a
finding of their own, the critical chain's ranks) in rows of their own."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from lifecycle.audit import stragglers
from lifecycle.export._model import RankTrace, Trace

MAX_GROUPS = 48
MAX_OUTLIERS = 32
Signature = tuple[str | tuple[str, int] | None, ...]
"""A rank's coarse timing: its state, its run id, then (state, binned log2 of its time over the median)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One timeline row: the ranks it stands for, and the rank whose bars it draws (the group's
    most typical member: the one closest to the group's median timing)."""

    label: str
    ranks: tuple[int, ...]
    shown: RankTrace
    outlier: str | None = None


def rows(trace: Trace, *, per_rank_up_to: int = 64) -> list[Row]:
    """Every rank when there are at most `per_rank_up_to`, else groups and outliers."""
    if len(trace.ranks) <= per_rank_up_to:
        return [Row(label=r.label, ranks=(r.rank,), shown=r, outlier=_why(r, set())) for r in trace.ranks]
    slow = {s.rank for s in stragglers([r.audit for r in trace.ranks])}
    chain = {link.rank for link in trace.chain}
    outliers = [r for r in trace.ranks if _why(r, slow) or r.rank in chain][:MAX_OUTLIERS]
    picked = {id(r) for r in outliers}
    rest = [r for r in trace.ranks if id(r) not in picked]
    out = _groups(rest)
    out += [Row(label=r.label, ranks=(r.rank,), shown=r, outlier=_why(r, slow) or "critical chain") for r in outliers]
    return out


def _why(rank: RankTrace, slow: set[int]) -> str | None:
    if rank.failed:
        return f"startup {rank.audit.failure.kind}" if rank.audit.failure is not None else "failed"
    if rank.unfinished is not None:
        return "log stops"
    if rank.rank in slow:
        return "straggler"
    rules = sorted({f.rule for f in rank.audit.findings()})
    return f"violation {','.join(rules)}" if rules else None


def _groups(ranks: Sequence[RankTrace]) -> list[Row]:
    """Ranks with the same coarse timing signature share a row; the bins widen until there are at
    most MAX_GROUPS groups."""
    if not ranks:
        return []
    medians = _medians(ranks)
    width = 0.25
    while True:
        groups: dict[Signature, list[RankTrace]] = defaultdict(list)
        for rank in ranks:
            groups[_signature(rank, medians, width)].append(rank)
        if len(groups) <= MAX_GROUPS or width > 64:
            break
        width *= 2
    ordered = sorted(groups.values(), key=lambda g: g[0].rank)
    return [Row(label=_label(g), ranks=tuple(r.rank for r in g), shown=_typical(g, medians)) for g in ordered]


def _durations(rank: RankTrace) -> dict[str, float]:
    out: dict[str, float] = {}
    for seg, _ in rank.segments:
        out[seg.state] = out.get(seg.state, 0.0) + seg.duration
    return out


def _medians(ranks: Sequence[RankTrace]) -> dict[str, float]:
    values: dict[str, list[float]] = defaultdict(list)
    for rank in ranks:
        for state, d in _durations(rank).items():
            values[state].append(d)
    return {s: sorted(v)[len(v) // 2] for s, v in values.items()}


def _signature(rank: RankTrace, medians: dict[str, float], width: float) -> Signature:
    """Per state, log2 of the time over the state's median, in bins of `width` (0.25: ±19%)."""
    durations = _durations(rank)
    bins = tuple(
        (s, round(math.log2(max(d, 1e-6) / max(medians.get(s, d), 1e-6)) / width)) for s, d in sorted(durations.items())
    )
    return (rank.audit.state, rank.audit.run_id, *bins)


def _typical(group: Sequence[RankTrace], medians: dict[str, float]) -> RankTrace:
    def distance(rank: RankTrace) -> float:
        return sum(abs(d - medians.get(s, d)) for s, d in _durations(rank).items())

    return min(group, key=distance)


def _label(group: Sequence[RankTrace]) -> str:
    ranks = [r.rank for r in group]
    return f"{len(ranks)} ranks: {_ranges(ranks)}" if len(ranks) > 1 else group[0].label


def _ranges(ranks: Sequence[int], limit: int = 6) -> str:
    spans: list[str] = []
    start = prev = ranks[0]
    for rank in [*ranks[1:], None]:
        if rank is not None and rank == prev + 1:
            prev = rank
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if rank is not None:
            start = prev = rank
    return ",".join(spans[:limit]) + (f",… ({len(spans) - limit} more runs)" if len(spans) > limit else "")
