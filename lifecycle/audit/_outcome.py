"""How the logs say the job ended, when no rank's own failure explains it: the verdict's `clean`,
`stopped`, `incomplete` and `tampered` outcomes (`_verdict.py`), each proved by records, never by
their absence.

A rank ended cleanly only with its own closing record: its log reaches SHUT_DOWN with no failure
kept. A run is clean only when every rank of the world its records declare ended so (a simulation:
every rank it drove). A rank that stopped after its startup is either `signalled` (its
`signal_received`: stopped from outside, by the launcher or an operator) or `short` (no failure,
no signal, no shutdown: it died, or its log was cut). Work and memory: one pass over the ranks'
summaries, O(ranks).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice

from lifecycle.audit._rank import RankAudit
from lifecycle.errors import LogUnreadable
from lifecycle.log import JSONValue
from states import State

_SHUT = State.SHUT_DOWN.name
SHOWN = 16
"""Ranks named in one list of the verdict (`missing`, `unended`): the first ones; counts say the rest."""


def closed(rank: RankAudit) -> bool:
    """The rank's own log shows its clean end: SHUT_DOWN reached, no failure kept, no signal taken
    after the startup (a SIGINT's shutdown is a stop, not an end), the last line whole."""
    return rank.failure is None and rank.state == _SHUT and rank.shut and not rank.cut and rank.signalled is None


@dataclass(frozen=True, slots=True, kw_only=True)
class Ends:
    """One run's ranks by how their logs end. `missing`: ranks of the declared world with no log."""

    run_id: str | None
    world: int
    clean: int
    failed: int
    signalled: tuple[RankAudit, ...]
    short: tuple[RankAudit, ...]
    missing: tuple[int, ...]
    missing_count: int

    @property
    def proven(self) -> bool:
        """Every rank of the world ended with its own clean closing record."""
        return not (self.failed or self.signalled or self.short or self.missing_count) and self.clean > 0


def ends(ranks: Sequence[RankAudit]) -> list[Ends]:
    """Each run's `Ends`, in the order the runs are first seen; ranks with a failure are in none of
    the lists (the root cause judges them) and keep a run from being proven."""
    runs: dict[str | None, list[RankAudit]] = defaultdict(list)
    for rank in ranks:
        if rank.rank is not None and rank.records:
            runs[rank.run_id].append(rank)
    return [_ends(run_id, group) for run_id, group in runs.items()]


def _ends(run_id: str | None, group: list[RankAudit]) -> Ends:
    present = {r.rank for r in group if r.rank is not None}
    simulated = all(r.simulated is not None for r in group)
    world = len(present) if simulated else max(r.world_size or 0 for r in group)
    inside = sum(0 <= r < world for r in present)
    absent = [] if simulated else list(islice((r for r in range(world) if r not in present), SHOWN))
    open_ = [r for r in group if r.failure is None and not closed(r)]
    return Ends(
        run_id=run_id,
        world=world,
        clean=sum(closed(r) for r in group),
        failed=sum(r.failure is not None for r in group),
        signalled=tuple(sorted((r for r in open_ if r.signalled is not None), key=_when)),
        short=tuple(sorted((r for r in open_ if r.signalled is None), key=_when)),
        missing=tuple(absent),
        missing_count=0 if simulated else world - inside,
    )


def _when(rank: RankAudit) -> tuple[float, int]:
    """The order logs stopped in: the last record's time, then the rank."""
    return (rank.last_ts if rank.last_ts is not None else float("inf"), rank.rank or 0)


def tampered(ranks: Sequence[RankAudit]) -> list[RankAudit]:
    """Ranks whose hash chain does not verify (a record changed, removed, inserted or reordered; a
    head missing), first line first."""
    return sorted((r for r in ranks if r.broken is not None), key=lambda r: (r.source, r.broken or 0))


Doc = dict[str, JSONValue]


def where(source: str | None, line: int | None) -> str:
    return f"{source}:{line}" if line is not None else str(source)


def unreadable_doc(errors: Sequence[LogUnreadable]) -> Doc:
    """Some input cannot be read: no rank is judged dead for it and no host excluded."""
    shown = [where(e.source, e.line) for e in errors[:SHOWN]]
    reason = errors[0].reason if errors else "no input could be read"
    return {"outcome": "unreadable", "class": None, "action": "STOP", "where": shown, "reason": reason}


def tampered_doc(broken: Sequence[RankAudit], launchers: Sequence[str] = ()) -> Doc:
    """A hash chain does not verify (a rank's, or a launcher record's): the records cannot be trusted
    to say who failed."""
    wheres = [*(where(r.source, r.broken) for r in broken), *launchers][:SHOWN]
    whose = f"rank {broken[0].rank}'s" if broken else "the launcher record's"
    return {
        "outcome": "tampered",
        "run_id": broken[0].run_id if broken else None,
        "class": None,
        "action": "STOP",
        "where": wheres,
        "reason": f"{whose} hash chain does not verify at {wheres[0]} (LA009): a record was changed, removed, "
        "inserted or reordered, so no rank is blamed from these logs",
    }


def stopped_doc(run: Ends, signal: str | None, sender: str | None) -> Doc:
    """Every rank that did not end cleanly was stopped by a signal after its startup."""
    first = run.signalled[0]
    return {
        "outcome": "stopped",
        "run_id": run.run_id,
        "culprit": {"rank": first.rank, "host": first.host},
        "signal": signal or first.signalled,
        "sender": sender,
        "state": first.state,
        "phase": first.open_trigger,
        "class": "infrastructure",
        "action": "RESTART",
        "exclude_hosts": [],
        "reason": f"stopped from outside: {len(run.signalled)} rank(s) took {signal or first.signalled} after the "
        f"startup, none failed on its own",
        "victims": [r.rank for r in run.signalled[1:SHOWN]],
        "evidence": [_stop(first, "signalled")],
    }


def died_doc(run: Ends) -> Doc:
    """A rank whose log stops with no record of why while the others were stopped by a signal after
    it: it died (SIGKILL: the OOM killer, a lost device), and the launcher stopped the rest."""
    first = run.short[0]
    return {
        "outcome": "failed",
        "run_id": run.run_id,
        "culprit": {"rank": first.rank, "host": first.host},
        "missing": [],
        "state": first.state,
        "phase": first.open_trigger,
        "class": "infrastructure",
        "action": "RESTART",
        "exclude_hosts": [first.host] if first.host else [],
        "reason": f"rank {first.rank}'s log stops in state {first.state} with no failure, signal or shutdown record, "
        f"and {len(run.signalled)} rank(s) were stopped by {run.signalled[0].signalled} after it: it died",
        "at_s": None,
        "victims": [r.rank for r in (*run.short[1:], *run.signalled)][:SHOWN],
        "runs_failed": 1,
        "evidence": [_stop(first, "died")],
    }


def incomplete_doc(runs: Sequence[Ends], unheard: Sequence[RankAudit] = ()) -> Doc:
    """No cause found and no clean end proven: the logs cannot tell why the job did not end.
    `unheard`: ranks whose log stops, started by a `lifecycle run` that left no record of its end."""
    run = next(r for r in runs if not r.proven)
    stops = sorted({*run.short, *unheard}, key=_when)
    short = [r.rank for r in stops[:SHOWN]]
    parts = [f"ranks {short} stop with no failure, signal or shutdown record"] if short else []
    if unheard:
        hosts = sorted({r.host or "?" for r in unheard})[:SHOWN]
        parts.append(
            f"lifecycle run started them and left no record of its end on {', '.join(hosts)} (launcher-NNNNN.jsonl): "
            "it was killed or is still running, so a log that stops proves no death"
        )
    parts += [f"ranks {list(run.missing)} of the {run.world} have no log"] if run.missing_count else []
    parts += [f"ranks {[r.rank for r in run.signalled[:SHOWN]]} were stopped by a signal"] if run.signalled else []
    return {
        "outcome": "incomplete",
        "run_id": run.run_id,
        "class": None,
        "action": "STOP",
        "unended": short,
        "missing": list(run.missing),
        "reason": "the job did not end cleanly and the logs do not say why: " + "; ".join(parts or ["no rank closed"]),
        "evidence": [_stop(r, "stops") for r in stops[:5]],
    }


def _stop(rank: RankAudit, kind: str) -> Doc:
    return {"source": rank.source, "line": rank.line, "rank": rank.rank, "kind": kind}
