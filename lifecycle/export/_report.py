"""`lifecycle report`: one self-contained HTML page of a run's startup (no network, no CDN).

The page is `report.html` (CSS and JavaScript inline) with the data as JSON in a script element;
the JavaScript draws the timeline on a canvas and fills the tables with `textContent` only, so
nothing a log holds can become markup.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import NotRequired, TypedDict
from urllib.parse import urlsplit

import orjson

from lifecycle.audit import RULES, Finding, RootCause, StateBlame, blame, no_gc, stragglers, timeout_maps, write_output
from lifecycle.export._model import Cycle, RankTrace, Trace
from lifecycle.export._rows import Row, rows
from lifecycle.log import JSONValue, events
from states import STARTUP_ORDER, State

RULES_URL = "docs/rules/"
_STATES = [events.IMPORTS] + [s.name for s in STARTUP_ORDER[1:]] + [State.FAILED.name, State.SHUT_DOWN.name]
_PLACEHOLDER = b"/*LIFECYCLE_DATA*/null"
_TITLE = b"<title>megatron-lifecycle startup report</title>"


def ours(head: bytes) -> bool:
    """A report we wrote: the only file `write_report` replaces."""
    return head.startswith(b"<!DOCTYPE html>") and _TITLE in head


class RowData(TypedDict):
    """A timeline row: `bars` are [state, start, end, attempt], `marks` [time, kind, event, detail];
    `unfinished` [trigger, start, end], `failure` [time, kind, message]."""

    label: str
    n: int
    shown: int
    outlier: str | None
    bars: list[list[JSONValue]]
    marks: list[list[JSONValue]]
    ranks: NotRequired[list[int]]
    unfinished: NotRequired[list[JSONValue]]
    failure: NotRequired[list[JSONValue]]


class ReportData(TypedDict):
    """What the page shows (`report.html` reads these keys); times in seconds since `t0`."""

    title: str
    run_ids: list[str]
    world_size: int
    ranks: int
    records: int
    t0: float
    states: list[str]
    aggregated: bool
    rows: list[RowData]
    chain: list[dict[str, JSONValue]]
    findings: list[dict[str, JSONValue]]
    causes: list[dict[str, JSONValue]]
    cycles: list[dict[str, JSONValue]]
    fingerprints: list[str]
    blame: list[dict[str, JSONValue]]
    stragglers: list[dict[str, JSONValue]]
    timeouts: list[dict[str, JSONValue]]


def rules_url_problem(url: str) -> str | None:
    """Why `url` cannot be where the rule pages are (the page links to it), or None: an http(s) URL
    or a path (no scheme), without spaces or control characters (browsers drop them, which can
    make `java\tscript:` a scheme)."""
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        return f"{url!r} holds a space or a control character: give an http(s) URL or a path, e.g. docs/rules/"
    scheme = urlsplit(url).scheme.lower()
    if scheme not in ("", "http", "https"):
        return f"{url!r} is a {scheme}: URL; give an http(s) URL or a path, e.g. docs/rules/"
    return None


def report_data(trace: Trace, *, rules_url: str = RULES_URL, per_rank_up_to: int = 64) -> ReportData:
    """What the page shows, as plain JSON values; times in seconds since the run's first record.
    Raises ValueError for a `rules_url` that is not an http(s) URL or a path."""
    problem = rules_url_problem(rules_url)
    if problem is not None:
        raise ValueError(f"rules_url {problem}")
    audits = [r.audit for r in trace.ranks]
    timeline = rows(trace, per_rank_up_to=per_rank_up_to)
    return {
        "title": f"startup of run {', '.join(trace.run_ids) or '?'}",
        "run_ids": list(trace.run_ids),
        "world_size": trace.world_size,
        "ranks": len(trace.ranks),
        "records": trace.result.records,
        "t0": trace.t0,
        "states": _STATES,
        "aggregated": len(trace.ranks) > per_rank_up_to,
        "rows": [_row(row, trace.t0) for row in timeline],
        "chain": [{"state": c.state, "rank": c.rank, "at": c.at, "duration": c.duration} for c in trace.chain],
        "findings": _findings(trace.result.findings, rules_url),
        "causes": [_cause(c) for c in trace.root_causes],
        "cycles": [_cycle(c, trace.t0) for c in trace.cycles],
        "fingerprints": sorted({a.fingerprint for a in audits if a.fingerprint}),
        "blame": [_blame(b, trace.ranks) for b in blame(audits)],
        "stragglers": [
            {"rank": s.rank, "state": s.state, "duration": s.duration, "median": s.median}
            for s in stragglers(audits)[:50]
        ],
        "timeouts": [
            {"run_id": t.run_id, "rank": t.rank, "same": t.same, "other": list(t.other)[:50], "line": t.line}
            for t in timeout_maps(audits)
        ],
    }


def _findings(findings: Sequence[Finding], rules_url: str) -> list[dict[str, JSONValue]]:
    """Each finding, with its rule's slug and the page that explains it."""
    by_rule = {r.id: r for r in RULES}
    return [
        {
            "rule": f.rule,
            "slug": by_rule[f.rule].slug,
            "url": f"{rules_url}{f.rule}.md",
            "rank": f.rank,
            "where": f.where,
            "message": f.message,
            "count": f.count,
        }
        for f in findings
    ]


def _cause(c: RootCause) -> dict[str, JSONValue]:
    """A root cause: the first failure, where it was logged, and the ranks it took down."""
    return {
        "run_id": c.run_id,
        "rank": c.rank,
        "kind": c.kind,
        "message": c.message,
        "at": c.at,
        "where": c.source if c.line is None else f"{c.source}:{c.line}",
        "victims": [{"rank": v.rank, "kind": v.kind, "message": v.message} for v in c.victims],
    }


def _cycle(c: Cycle, t0: float) -> dict[str, JSONValue]:
    """A restart cycle: when it started, who took part, and what changed from the one before."""
    return {
        "attempt": c.attempt,
        "start": c.start - t0,
        "ranks": c.ranks,
        "hosts": c.hosts,
        "fingerprints": list(c.fingerprints),
        "failed": list(c.failed),
        "changes": list(c.changes),
    }


def _blame(b: StateBlame, ranks: tuple[RankTrace, ...]) -> dict[str, JSONValue]:
    """A state's time across the ranks, its slowest rank, and its counts."""
    return {
        "state": b.state,
        "ranks": b.ranks,
        "median": b.median,
        "p90": b.p90,
        "max": b.max,
        "slowest": b.slowest_rank,
        "counts": _counts(ranks, b.state),
    }


def _row(row: Row, t0: float) -> RowData:
    rank = row.shown
    bars: list[list[JSONValue]] = [[seg.state, seg.start - t0, seg.end - t0, attempt] for seg, attempt in rank.segments]
    out: RowData = {
        "label": row.label,
        "n": len(row.ranks),
        "shown": rank.rank,
        "outlier": row.outlier,
        "bars": bars,
        "marks": [[m.ts - t0, m.kind, m.event, m.detail] for m in rank.marks[:50]],
    }
    if len(row.ranks) <= 64:
        out["ranks"] = list(row.ranks)
    if rank.unfinished is not None:
        trigger, start, end = rank.unfinished
        out["unfinished"] = [trigger, start - t0, end - t0]
    failure = rank.audit.failure
    if failure is not None and failure.ts is not None:
        out["failure"] = [failure.ts - t0, failure.kind, failure.message]
    return out


def _counts(ranks: tuple[RankTrace, ...], state: str) -> dict[str, list[int]]:
    """Per count (process groups, collectives, store operations): [median, max] across the ranks
    that have it (the simulation records them)."""
    values: dict[str, list[int]] = {}
    for rank in ranks:
        for name, value in rank.counts.get(state, {}).items():
            values.setdefault(name, []).append(value)
    return {name: [sorted(v)[len(v) // 2], max(v)] for name, v in values.items()}


def render(data: ReportData) -> bytes:
    """The page: the template with `data` in it. `<` is written as `\\u003c` inside the JSON, so
    no value can close the script element."""
    template = files("lifecycle.export").joinpath("report.html").read_bytes()
    blob = orjson.dumps(data).replace(b"<", b"\\u003c")
    if _PLACEHOLDER not in template:
        raise RuntimeError("lifecycle/export/report.html has lost its data placeholder")
    return template.replace(_PLACEHOLDER, blob, 1)


def write_report(trace: Trace, output: str | Path, *, rules_url: str = RULES_URL, per_rank_up_to: int = 64) -> Path:
    """Write the HTML report of `trace` to `output` (`write_output`: whole or not at all, and only
    over a report we wrote)."""
    with no_gc():
        data = render(report_data(trace, rules_url=rules_url, per_rank_up_to=per_rank_up_to))
    return write_output(output, data, ours=ours)
