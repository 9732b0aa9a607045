"""The audit's output: a human report (systemd-analyze style) or JSON.

Text output escapes every character that is not printable (terminal escape sequences in an `error`
field, a file name with a newline): a log is untrusted input and must not drive the terminal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, NamedTuple, TypedDict

import orjson

from lifecycle.audit._audit import AuditResult
from lifecycle.audit._cross import ranges
from lifecycle.audit._cycles import attempt_lines, attempts
from lifecycle.audit._rank import RankAudit
from lifecycle.audit._records import Finding
from lifecycle.audit._rules import BY_ID, RuleId
from lifecycle.audit._timing import blame, critical_chain, rank_blame, stragglers
from lifecycle.redaction import redact, redact_text

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

PER_RULE = 10
_CAUSE = RuleId.ROOT_CAUSE


def printable(text: str) -> str:
    """`text` with credentials redacted (`lifecycle.redaction`) and control and other non-printable
    characters written as Python escapes (`\\x1b`)."""
    text = redact_text(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def text(result: AuditResult, *, show_blame: bool = False, show_chain: bool = False, per_rule: int = PER_RULE) -> str:
    """The report: the summary, then the root cause, then the findings. At most `per_rule` findings
    of each rule are printed, then the ranks of the rest (`--format json` has every one)."""
    causes = [f for f in result.findings if f.rule == _CAUSE]
    out = [_summary(result), *map(_line, causes)]
    shown: dict[str, int] = {}
    rest: dict[str, list[int]] = {}
    for f in result.findings:
        if f.rule == _CAUSE:
            continue
        shown[f.rule] = shown.get(f.rule, 0) + 1
        if shown[f.rule] > per_rule:
            rest.setdefault(f.rule, []).append(-1 if f.rank is None else f.rank)
            continue
        out.append(_line(f))
    for rule_id, ranks in rest.items():
        out.append(f"{rule_id} [{BY_ID[rule_id].slug}] also on ranks {ranges(ranks)}")
    out += _warning_lines(result)
    out += _timeout_lines(result)
    cycles = attempts(result.ranks)
    if any(a.cycle > 0 or a.ended for a in cycles):  # restart cycles: one line each
        out += attempt_lines(cycles)
    if show_blame:
        out += _blame_lines(result, causes)
    if show_chain:
        out += _chain_lines(result)
    if show_blame or show_chain:
        out += _straggler_lines(result)
    return "\n".join(map(printable, out))


def _line(f: Finding) -> str:
    rule = BY_ID[f.rule]
    rank = "" if f.rank is None else f" rank {f.rank}"
    more = f" (x{f.count})" if f.count > 1 else ""
    return f"{f.where}:{rank} {rule.id} [{rule.slug}] {f.message}{more}"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _summary(result: AuditResult) -> str:
    ranks = sorted({a.rank for a in result.ranks if a.rank is not None and a.records})
    who = "no ranks" if not ranks else f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranges(ranks)}"
    verdict = (
        "no records"
        if not result.records
        else "UNREADABLE INPUT"
        if result.errors
        else _plural(len(result.findings), "violation")
        if result.findings
        else "clean"
    )
    sim = simulated(result)
    who += f", simulated {sim['ranks']} of {sim['world_size']}" if sim else ""
    return f"audited {_plural(result.records, 'record')} from {_plural(result.sources, 'input')}, {who}: {verdict}"


def simulated(result: AuditResult) -> dict[str, int] | None:
    """{ranks, world_size} when every log comes from `lifecycle simulate`, else None."""
    if not result.ranks or any(a.simulated is None for a in result.ranks):
        return None
    ranks = {a.rank for a in result.ranks if a.rank is not None}
    return {"ranks": len(ranks), "world_size": max(a.world_size or 0 for a in result.ranks)}


class WarningRow(TypedDict):
    """A distinct warning and the ranks that logged it."""

    category: str
    module: str
    message: str
    ranks: list[int]


def warnings(result: AuditResult) -> list[WarningRow]:
    """Each distinct third-party warning the ranks logged, with the ranks that logged it."""
    by_key: dict[tuple[str, str, str], set[int]] = {}
    for audit in result.ranks:
        for key in audit.warnings:
            by_key.setdefault(key, set()).add(-1 if audit.rank is None else audit.rank)
    return [
        WarningRow(category=c, module=m, message=msg, ranks=sorted(ranks))
        for (c, m, msg), ranks in sorted(by_key.items())
    ]


def _warning_lines(result: AuditResult) -> list[str]:
    found = warnings(result)
    if not found:
        return []
    out = ["", f"warnings ({len(found)} distinct, from the libraries; not violations):"]
    out += [f"  {w['module']}: {w['category']}: {w['message'][:200]} (ranks {ranges(w['ranks'])})" for w in found]
    return out


class TimeoutSummary(NamedTuple):
    """A run's timeout map as `lifecycle audit` and `lifecycle report` show it."""

    run_id: str | None
    rank: int
    same: int
    other: tuple[int, ...]  # the ranks whose timeouts_read differs from `rank`'s
    line: str


def timeout_maps(ranks: Sequence[RankAudit]) -> list[TimeoutSummary]:
    """Each run's timeout map (`timeouts_read`): its lowest rank's, and the ranks that read another."""
    runs: dict[str | None, list[RankAudit]] = {}
    for rank in ranks:
        if rank.timeouts is not None and rank.rank is not None:
            runs.setdefault(rank.run_id, []).append(rank)
    out = []
    for run_id, group in runs.items():
        first = min(group, key=lambda r: r.rank or 0)
        assert first.timeouts is not None and first.rank is not None
        other = tuple(r.rank or 0 for r in group if r.timeouts != first.timeouts)
        out.append(TimeoutSummary(run_id, first.rank, len(group) - len(other), other, first.timeouts.line()))
    return out


def _timeout_lines(result: AuditResult) -> list[str]:
    out = []
    for t in timeout_maps(result.ranks):
        differ = f"; ranks {ranges(list(t.other))} read other timeouts" if t.other else ""
        out += ["", f"timeouts (run {t.run_id}, rank {t.rank}; {t.same} ranks the same{differ}):", f"  {t.line}"]
    return out


def _blame_lines(result: AuditResult, causes: list[Finding]) -> list[str]:
    out = ["", "blame (entry time per state across ranks, slowest first):"]
    out += [f"  {_line(f)}" for f in causes]
    out.append(f"  {'state':<16} {'ranks':>6} {'median':>9} {'p90':>9} {'max':>9}  slowest rank")
    counted = counts(result.ranks)
    for b in blame(result.ranks):
        out.append(f"  {b.state:<16} {b.ranks:>6} {_s(b.median)} {_s(b.p90)} {_s(b.max)}  {b.slowest_rank}")
    if counted:
        out += ["", "per rank and state (lifecycle simulate): median (max) across the simulated ranks"]
        names = sorted({name for row in counted.values() for name in row})
        out.append(f"  {'state':<16} " + " ".join(f"{n:>18}" for n in names))
        for state, row in counted.items():
            cells = (f"{row[n][0]} ({row[n][1]})" if n in row else "-" for n in names)
            out.append(f"  {state:<16} " + " ".join(f"{c:>18}" for c in cells))
    out += ["", "slowest ranks:"]
    out += [f"  {_s(r.duration)}  rank {r.rank:<6} {r.state}" for r in rank_blame(result.ranks)]
    return out


def counts(ranks: Sequence[RankAudit]) -> dict[str, dict[str, tuple[int, int]]]:
    """state -> count name (`process_groups`, `collectives`) -> (median, max) across the ranks
    whose `rank_simulated` record has it; empty for runs that are not simulations."""
    values: dict[str, dict[str, list[int]]] = {}
    for audit in ranks:
        for state, row in audit.counts.items():
            for name, value in row.items():
                values.setdefault(state, {}).setdefault(name, []).append(value)
    return {state: {name: (sorted(v)[len(v) // 2], max(v)) for name, v in row.items()} for state, row in values.items()}


def _chain_lines(result: AuditResult) -> list[str]:
    out = ["", "critical chain (the last rank to reach each state; @ since the first rank started):"]
    for link in critical_chain(result.ranks):
        out.append(f"  {link.state:<16} @{link.at:.3f}s +{link.duration:.3f}s  rank {link.rank}")
    return out


def _straggler_lines(result: AuditResult) -> list[str]:
    found = stragglers(result.ranks)
    out = ["", f"stragglers ({len(found)}: over 3x the median time in a state):"]
    out += [
        f"  rank {s.rank:<6} {s.state:<16} {s.duration:.3f}s vs median {s.median:.3f}s ({s.factor:.1f}x)"
        for s in found[:20]
    ]
    return out


def _s(seconds: float) -> str:
    return f"{seconds:>8.3f}s"


def as_json(result: AuditResult, *, with_timing: bool = True) -> bytes:
    doc: dict[str, object] = {
        "exit_code": result.exit_code,
        "records": result.records,
        "sources": result.sources,
        "ranks": len(result.ranks),
        "simulated": simulated(result),
        "warnings": warnings(result),
        "errors": [{key: e.context.get(key) for key in ("source", "line", "reason")} for e in result.errors],
        "root_causes": [_fields(c) | {"victims": [_fields(v) for v in c.victims]} for c in result.root_causes],
        "findings": [
            {
                "rule": f.rule,
                "slug": BY_ID[f.rule].slug,
                "message": f.message,
                "run_id": f.run_id,
                "rank": f.rank,
                "source": f.source,
                "line": f.line,
                "count": f.count,
            }
            for f in result.findings
        ],
    }
    if with_timing:
        doc["blame"] = [_fields(b) for b in blame(result.ranks)]
        doc["critical_chain"] = [_fields(c) for c in critical_chain(result.ranks)]
        if counted := counts(result.ranks):
            doc["counts"] = counted
        doc["stragglers"] = [_fields(s) for s in stragglers(result.ranks)]
    return orjson.dumps(redact(doc), option=orjson.OPT_INDENT_2)


def _fields(record: DataclassInstance) -> dict[str, object]:
    return {field.name: getattr(record, field.name) for field in fields(record)}
