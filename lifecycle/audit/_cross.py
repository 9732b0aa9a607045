"""Checks across ranks: runs, missing and duplicate ranks, and agreement on fingerprint, end state
and transition sequence. They read only the per-rank summaries."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence

from lifecycle.audit._rank import RankAudit
from lifecycle.audit._records import Finding
from lifecycle.audit._rules import RuleId

_SHOWN = 16


def ranges(ranks: Iterable[int]) -> str:
    """`0-3,7,9-12`, shortened after a few ranges, with the total."""
    ordered = sorted(set(ranks))
    spans: list[str] = []
    start = prev = None
    for rank in [*ordered, None]:
        if rank is not None and prev is not None and rank == prev + 1:
            prev = rank
            continue
        if start is not None:
            spans.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = rank
    shown = ",".join(spans[:_SHOWN]) + (",…" if len(spans) > _SHOWN else "")
    return f"{shown} ({len(ordered)} rank{'s' if len(ordered) != 1 else ''})"


def missing(present: Iterable[int], world: int) -> str | None:
    """`ranges()` of the ranks in [0, world) not in `present`, without building them: a hostile
    world_size of 10**12 costs no more than a real one."""
    inside = sorted({r for r in present if 0 <= r < world})
    spans: list[str] = []
    count, expect = 0, 0
    for rank in [*inside, world]:
        if rank > expect:
            spans.append(str(expect) if rank - 1 == expect else f"{expect}-{rank - 1}")
            count += rank - expect
        expect = rank + 1
    if not count:
        return None
    shown = ",".join(spans[:_SHOWN]) + (",…" if len(spans) > _SHOWN else "")
    return f"{shown} ({count} rank{'s' if count != 1 else ''})"


def cross_rank(streams: Sequence[RankAudit]) -> list[Finding]:
    runs: dict[str | None, list[RankAudit]] = defaultdict(list)
    for stream in streams:
        if stream.records:
            runs[stream.run_id].append(stream)
    findings: list[Finding] = []
    if len(runs) > 1:
        listed = ", ".join(f"{run!r} ({len(s)} logs)" for run, s in runs.items())
        findings.append(
            Finding(
                rule=RuleId.MIXED_RUNS,
                message=f"logs of {len(runs)} runs were given: {listed}; audit one run's log_dir at a time",
            )
        )
    for run_id, group in runs.items():
        findings += _ranks_present(run_id, group)
        findings += _agree(
            run_id, group, RuleId.FINGERPRINT_DISAGREEMENT, "config fingerprint", lambda s: s.fingerprint, _short
        )
        findings += _agree(run_id, group, RuleId.FINAL_STATE_DISAGREEMENT, "final state", _final_state, _state)
        findings += _agree(
            run_id,
            group,
            RuleId.TRANSITION_SEQUENCE_DISAGREEMENT,
            "transition sequence",
            lambda s: tuple(s.transitions),
            _sequence,
        )
    return findings


def _ranks_present(run_id: str | None, group: list[RankAudit]) -> list[Finding]:
    by_rank: dict[int, list[str]] = defaultdict(list)
    for stream in group:
        if stream.rank is not None:
            by_rank[stream.rank].append(stream.source)
    sizes = Counter(s.world_size for s in group if s.world_size is not None)
    return _duplicate_logs(run_id, by_rank) + (_world_covered(run_id, group, by_rank, sizes) if sizes else [])


def _world_covered(
    run_id: str | None, group: list[RankAudit], by_rank: dict[int, list[str]], sizes: Counter[int]
) -> list[Finding]:
    """Every rank of the world size has a log (a simulation only those it drove), and no more."""
    found: list[Finding] = []
    world = max(sizes)
    absent = missing(by_rank, world)
    simulated = [s.simulated for s in group if s.simulated is not None]
    if absent and len(simulated) == len(group):  # `lifecycle simulate` drove only some ranks, on purpose
        if len(by_rank) < max(simulated):
            found.append(
                Finding(
                    rule=RuleId.MISSING_RANKS,
                    run_id=run_id,
                    message=f"a simulation of {max(simulated)} of "
                    f"{world} ranks left logs for only {len(by_rank)}: pass every simulated rank's file",
                )
            )
        absent = None
    outside = {r for r in by_rank if not 0 <= r < world}
    if absent:
        found.append(
            Finding(
                rule=RuleId.MISSING_RANKS,
                run_id=run_id,
                message=f"world_size is {world} but there is no log for ranks {absent}: pass every rank's file",
            )
        )
    if len(sizes) > 1 or outside:
        found.append(
            Finding(
                rule=RuleId.MISSING_RANKS,
                run_id=run_id,
                message=f"ranks disagree on world_size "
                f"{dict(sizes)} or claim ranks outside it: {ranges(outside) if outside else '-'}",
            )
        )
    return found


def _duplicate_logs(run_id: str | None, by_rank: dict[int, list[str]]) -> list[Finding]:
    return [
        Finding(
            rule=RuleId.DUPLICATE_RANKS,
            run_id=run_id,
            rank=rank,
            message=f"rank {rank} has {len(sources)} logs: {', '.join(sources[:4])}",
        )
        for rank, sources in sorted(by_rank.items())
        if len(sources) > 1
    ]


def _final_state(stream: RankAudit) -> str:
    return "SHUT_DOWN" if stream.shut else stream.state


def _agree(
    run_id: str | None,
    group: list[RankAudit],
    rule: str,
    what: str,
    key: Callable[[RankAudit], Hashable],
    show: Callable[..., str],
) -> list[Finding]:
    values: dict[Hashable, list[int]] = defaultdict(list)
    for stream in group:
        value = key(stream)
        if value is not None and stream.rank is not None:
            values[value].append(stream.rank)
    if len(values) < 2:
        return []
    ordered = sorted(values.items(), key=lambda kv: -len(kv[1]))
    common, _ = ordered[0]
    parts = [f"{show(value, common)} on ranks {ranges(ranks)}" for value, ranks in ordered[1:4]]
    more = f" and {len(ordered) - 4} other values" if len(ordered) > 4 else ""
    return [
        Finding(
            rule=rule,
            run_id=run_id,
            message=f"ranks disagree on the {what}: most have "
            f"{show(common, None)} ({len(ordered[0][1])} ranks), but {'; '.join(parts)}{more}",
        )
    ]


def _short(value: str, common: str | None) -> str:
    return str(value)[:16]


def _state(value: str, common: str | None) -> str:
    return str(value)


def _sequence(value: tuple[tuple[str, str], ...], common: tuple[tuple[str, str], ...] | None) -> str:
    steps = [f"{trigger}→{dest}" for trigger, dest in value]
    if common is None:
        shown = steps if len(steps) <= 8 else [*steps[:3], f"…({len(steps) - 6})…", *steps[-3:]]
        return "[" + ", ".join(shown) + "]"
    shared = min(len(value), len(common))
    at = next((i for i in range(shared) if value[i] != common[i]), shared)
    theirs = steps[at] if at < len(steps) else "nothing (their log ends)"
    wanted = "→".join(common[at]) if at < len(common) else "nothing"
    return f"transition #{at + 1} {theirs} where the others have {wanted}"
