"""The startup of a run as one object to export: the audit's result (segments, findings, root
causes, critical chain) joined with what its taps kept of each rank file (`_details.Collect`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lifecycle.audit import (
    AuditResult,
    ChainLink,
    RankAudit,
    RootCause,
    Segment,
    Tap,
    audit_tapped,
    critical_chain,
    no_gc,
)
from lifecycle.errors import LogUnreadable
from lifecycle.export._details import Attempt, Collect, Config, Details, Mark, line_times, read_details
from lifecycle.log import JSONValue

COORDINATES = ("tp", "pp", "cp", "ep", "dp")


@dataclass(frozen=True, slots=True, kw_only=True)
class RankTrace:
    """One rank: its audit summary and the details of its log. `segments` are the audit's, each
    with the restart cycle (attempt) it belongs to."""

    audit: RankAudit
    coords: dict[str, int]
    attempts: tuple[Attempt, ...]
    segments: tuple[tuple[Segment, int], ...]
    marks: tuple[Mark, ...]
    steps: tuple[tuple[float, int, float | None, float | None], ...]
    unfinished: tuple[str, float, float] | None = None
    fingerprints: tuple[tuple[float, str], ...] = ()
    """(time, fingerprint) of each config_validated."""
    """The transition that never completed: (trigger, start, end), ended by the failure or the
    log's last record."""

    @property
    def rank(self) -> int:
        return self.audit.rank if self.audit.rank is not None else -1

    @property
    def label(self) -> str:
        shown = ", ".join(
            f"{k} {self.coords[k]}"
            for k in COORDINATES
            if k in self.coords and (k in ("tp", "pp", "dp") or self.coords[k])
        )
        return f"rank {self.rank} ({shown})" if shown else f"rank {self.rank}"

    @property
    def counts(self) -> dict[str, dict[str, int]]:
        """Per state: process groups created, collectives issued (logs of `lifecycle simulate`)."""
        return self.audit.counts

    @property
    def failed(self) -> bool:
        return self.audit.failure is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class Cycle:
    """One restart cycle (attempt) of the run: the ranks that started it, its config fingerprints,
    and what changed from the cycle before."""

    attempt: int
    start: float
    ranks: int
    fingerprints: tuple[str, ...]
    hosts: int
    failed: tuple[int, ...]
    changes: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Trace:
    """A run's startup, ready to export. `t0` is the first record's time."""

    result: AuditResult
    ranks: tuple[RankTrace, ...]
    t0: float
    chain: tuple[ChainLink, ...]
    cycles: tuple[Cycle, ...]

    @property
    def run_ids(self) -> tuple[str, ...]:
        return tuple(sorted({a.run_id for a in self.result.ranks if a.run_id is not None}))

    @property
    def root_causes(self) -> tuple[RootCause, ...]:
        return self.result.root_causes

    @property
    def world_size(self) -> int:
        return max((r.audit.world_size or 0 for r in self.ranks), default=0)


def load(paths: Sequence[str], *, jobs: int | None = None) -> Trace:
    """Audit the logs under `paths` (files or directories), keeping the details of each rank as it reads them.

    Raises LogUnreadable when an input cannot be read or holds no timed record (an export of half
    the logs would look complete)."""
    if any(p == "-" for p in paths):
        raise LogUnreadable(
            "stdin: an export reads each log twice; give the log files or their directory",
            source="-",
            line=None,
            reason="stdin cannot be read twice",
        )
    with no_gc():
        return _load(paths, jobs)


def _load(paths: Sequence[str], jobs: int | None) -> Trace:
    result, taps = audit_tapped(paths, Collect, jobs=jobs)
    if result.errors:
        raise result.errors[0]
    timed = [a for a in result.ranks if a.rank is not None and a.first_ts is not None]
    if not timed:
        raise LogUnreadable(
            f"{' '.join(paths)[:200]}: no rank has a timed record: nothing to export",
            source=paths[0] if paths else "",
            line=None,
            reason="no timed record",
        )
    details = _read(timed, result, taps)
    ranks = tuple(
        sorted(
            (_rank(a, details.get((a.source, a.rank), Details())) for a in timed),
            key=lambda r: (r.rank, r.audit.run_id or ""),
        )
    )
    t0 = min(a.first_ts for a in timed if a.first_ts is not None)
    configs = _first_configs(timed, details)
    return Trace(result=result, ranks=ranks, t0=t0, chain=tuple(critical_chain(timed)), cycles=_cycles(ranks, configs))


def _read(timed: list[RankAudit], result: AuditResult, taps: Sequence[Tap]) -> dict[tuple[str, int | None], Details]:
    """What the audit's taps kept of each rank file; the time of the lines a finding points at read
    from their files; the first rank's file read whole, for its configs (the others' are not kept)."""
    wanted: dict[str, set[int]] = defaultdict(set)
    for finding in result.findings:
        if finding.source is not None and finding.line is not None:
            wanted[finding.source].add(finding.line)
    first = min(timed, key=lambda a: a.rank or 0).source
    picked = {tap.source: tap.out for tap in taps if isinstance(tap, Collect)}
    out: dict[tuple[str, int | None], Details] = {}
    for source in dict.fromkeys(a.source for a in timed):
        if source == first:
            found = read_details(source, tuple(wanted.get(source, ())), configs=True)
        else:
            found = picked.get(source, {})
            if source in wanted:
                line_times(source, wanted[source], found)
        for rank, details in found.items():
            out[(source, rank)] = details
    return out


def _rank(audit_: RankAudit, found: Details) -> RankTrace:
    starts = sorted(found.attempts, key=lambda a: a.ts)
    segments = tuple((seg, _attempt_at(starts, seg.start)) for seg in audit_.segments)
    marks = list(found.marks)
    for finding in audit_.findings():
        if finding.line is not None and finding.line in found.line_ts:
            marks.append(
                Mark(
                    ts=found.line_ts[finding.line],
                    event=finding.rule,
                    kind="finding",
                    detail=finding.message[:300],
                    rule=finding.rule,
                )
            )
    return RankTrace(
        audit=audit_,
        coords=found.coords,
        attempts=tuple(starts),
        segments=segments,
        marks=tuple(sorted(marks, key=lambda m: m.ts)),
        steps=tuple(found.steps),
        unfinished=_unfinished(audit_),
        fingerprints=tuple((ts, fp) for ts, fp, _ in found.configs if fp is not None),
    )


def _unfinished(audit_: RankAudit) -> tuple[str, float, float] | None:
    failure = audit_.failure
    trigger = audit_.open_trigger or (failure.trigger if failure is not None else None)
    end = failure.ts if failure is not None and failure.ts is not None else audit_.last_ts
    last = max((s.end for s in audit_.segments), default=audit_.first_ts or 0.0)
    if trigger is None or end is None or not last <= audit_.open_start <= end:
        return None
    return trigger, audit_.open_start, end


def _attempt_at(starts: Sequence[Attempt], ts: float) -> int:
    current = starts[0].attempt if starts else 0
    for started in starts:
        if started.ts > ts:
            break
        current = started.attempt
    return current


def _first_configs(
    timed: list[RankAudit], details: dict[tuple[str, int | None], Details]
) -> list[tuple[float, Config | None]]:
    first = min(timed, key=lambda a: a.rank or 0)
    found = details.get((first.source, first.rank))
    return [] if found is None else [(ts, config) for ts, _, config in found.configs]


@dataclass(slots=True)
class _Seen:
    """What the ranks say of one attempt, gathered; `config` is the first rank's config at its start."""

    start: float = float("inf")
    ranks: set[int] = field(default_factory=set)
    fps: set[str] = field(default_factory=set)
    hosts: set[str | None] = field(default_factory=set)
    failed: set[int] = field(default_factory=set)
    config: Config | None = None


def _cycles(ranks: Sequence[RankTrace], configs: list[tuple[float, Config | None]]) -> tuple[Cycle, ...]:
    """One Cycle per attempt number seen, with the changes from the one before."""
    by_attempt: dict[int, _Seen] = defaultdict(_Seen)
    for rank in ranks:
        attempts = rank.attempts or (
            Attempt(
                ts=rank.audit.first_ts or 0.0, attempt=0, restart_count=None, host=None, pid=None, plan=rank.audit.plan
            ),
        )
        for started in attempts:
            row = by_attempt[started.attempt]
            row.start = min(row.start, started.ts)
            row.ranks.add(rank.rank)
            row.hosts.add(started.host)
        for ts, fingerprint in rank.fingerprints:
            by_attempt[_attempt_at(attempts, ts)].fps.add(fingerprint)
        last = by_attempt[attempts[-1].attempt]
        if rank.failed:
            last.failed.add(rank.rank)
    cycles: list[Cycle] = []
    previous: _Seen | None = None
    for number in sorted(by_attempt):
        row = by_attempt[number]
        row.config = _config_at(configs, row.start)
        changes = () if previous is None else _changes(previous, row)
        cycles.append(
            Cycle(
                attempt=number,
                start=row.start,
                ranks=len(row.ranks),
                fingerprints=tuple(sorted(row.fps)),
                hosts=len(row.hosts - {None}),
                failed=tuple(sorted(row.failed)),
                changes=changes,
            )
        )
        previous = row
    return tuple(cycles)


def _config_at(configs: list[tuple[float, Config | None]], start: float) -> Config | None:
    chosen = None
    for ts, config in configs:
        if ts >= start and chosen is None:
            chosen = config
    return chosen


def _changes(before: _Seen, row: _Seen) -> tuple[str, ...]:
    out = []
    if row.ranks != before.ranks:
        gone, new = sorted(before.ranks - row.ranks), sorted(row.ranks - before.ranks)
        out.append(
            f"ranks: {len(before.ranks)} -> {len(row.ranks)}"
            + (f", missing {_few(gone)}" if gone else "")
            + (f", new {_few(new)}" if new else "")
        )
    if row.hosts != before.hosts:
        out.append(f"hosts: {len(before.hosts - {None})} -> {len(row.hosts - {None})}")
    if row.fps != before.fps:
        out.append(f"config fingerprint: {_fps(before.fps)} -> {_fps(row.fps)}")
    if row.config is not None and before.config is not None:
        old, new_ = _flat(before.config), _flat(row.config)
        for key in sorted(old.keys() | new_.keys()):
            if old.get(key) != new_.get(key):
                out.append(f"{key}: {old.get(key)!r} -> {new_.get(key)!r}")
    return tuple(out[:40])


def _few(ranks: list[int]) -> str:
    return ",".join(map(str, ranks[:8])) + ("…" if len(ranks) > 8 else "")


def _fps(fps: set[str]) -> str:
    return ",".join(f[:12] for f in sorted(fps)) or "none"


def _flat(config: Mapping[str, JSONValue], prefix: str = "") -> dict[str, JSONValue]:
    out: dict[str, JSONValue] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
