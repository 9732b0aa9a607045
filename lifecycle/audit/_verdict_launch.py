"""The verdict from the launcher's record (`launch_ended`), where the ranks' logs cannot say it: the
rank torchrun saw end first, even when torchrun SIGTERMed the others before their rank watch named
it, and a launcher stopped by a signal itself.

The logs decide when a rank's own record shows it failing (a failed transition, a timeout, the
restart wrapper's last word). A log that only stops says nothing of when its process ended: there,
and where no rank failed on its own, torchrun's order decides.
"""

from __future__ import annotations

from collections.abc import Sequence

from lifecycle.audit._launches import Ended, Launch, doc, first_death, of_run
from lifecycle.audit._outcome import closed
from lifecycle.audit._rank import RankAudit
from lifecycle.log import JSONValue

FROM_OUTSIDE = ("SIGTERM", "SIGINT", "SIGHUP")
"""Signals that stop a rank from outside (an operator, a scheduler): the rank did not fail."""


def launch_verdict(
    ranks: Sequence[RankAudit], launches: Sequence[Launch], run_id: str | None
) -> dict[str, JSONValue] | None:
    """`failed` or `stopped` from the launcher's records of run `run_id`; None when they say nothing
    the logs do not (no launcher record, every rank exited 0)."""
    mine = of_run(launches, run_id)
    stopped = [launch for launch in mine if launch.signal is not None]
    if stopped:  # `lifecycle run` itself was stopped: it stopped its ranks
        return _stopped(ranks, run_id, stopped[0])
    first = first_death(mine)
    return None if first is None else _died(ranks, run_id, *first)


def unheard(ranks: Sequence[RankAudit], launches: Sequence[Launch], run_id: str | None) -> list[RankAudit]:
    """Ranks of run `run_id` whose log only stops (no failure, signal or shutdown record), that
    `lifecycle run` started, on a host whose launcher left no record of its end. The launcher was
    killed or is still running: such a log proves no death, and names no culprit."""
    heard = {launch.host for launch in of_run(launches, run_id)}
    return [
        r
        for r in ranks
        if r.run_id == run_id and r.launched and r.host not in heard and r.signalled is None and _stops(r)
    ]


def _stops(rank: RankAudit) -> bool:
    return rank.failure.kind == "died" if rank.failure is not None else not closed(rank)


def _log(ranks: Sequence[RankAudit], run_id: str | None, rank: int | None) -> RankAudit | None:
    return next((r for r in ranks if r.run_id == run_id and r.rank == rank), None)


def _stopped(ranks: Sequence[RankAudit], run_id: str | None, launch: Launch) -> dict[str, JSONValue]:
    first = _log(ranks, run_id, min((r.rank for r in ranks if r.run_id == run_id and r.rank is not None), default=None))
    return {
        "outcome": "stopped",
        "run_id": run_id,
        "culprit": {"rank": None, "host": launch.host},
        "signal": launch.signal,
        "sender": f"lifecycle run on {launch.host} (node {launch.node_rank}) took it and stopped its ranks",
        "state": first.state if first is not None else None,
        "phase": first.open_trigger if first is not None else None,
        "class": "infrastructure",
        "action": "RESTART",
        "exclude_hosts": [],
        "reason": f"the launcher was stopped by {launch.signal}: no rank failed on its own",
        "victims": sorted(r.rank for r in ranks if r.run_id == run_id and r.rank is not None)[:16],
        "evidence": [doc(launch)],
    }


def _died(ranks: Sequence[RankAudit], run_id: str | None, launch: Launch, first: Ended) -> dict[str, JSONValue]:
    log = _log(ranks, run_id, first.rank)
    host = log.host if log is not None and log.host else launch.host
    how = f"was killed by {first.signal}" if first.signal else f"exited {first.exitcode}"
    outside = first.signal in FROM_OUTSIDE
    klass = "infrastructure" if first.signal or first.exitcode in (None, 75) else "user-code"
    failure = log.failure if log is not None else None
    evidence: list[JSONValue] = [doc(launch)]
    if log is not None:
        evidence.append({"source": log.source, "line": log.line, "rank": first.rank, "kind": "stops"})
    out: dict[str, JSONValue] = {
        "outcome": "stopped" if outside else "failed",
        "run_id": run_id,
        "culprit": {"rank": first.rank, "host": host},
    }
    if outside:
        out |= {"signal": first.signal, "sender": "from outside: neither torchrun nor lifecycle run sent it"}
    return out | {
        "missing": [],
        "state": failure.state if failure is not None else log.state if log is not None else None,
        "phase": failure.trigger if failure is not None else log.open_trigger if log is not None else None,
        "class": klass,
        "action": "STOP" if klass == "user-code" else "RESTART",
        "exclude_hosts": [host] if first.signal and not outside and host else [],
        "reason": f"rank {first.rank} {how} first, as torchrun saw it ({launch.source}:{launch.line}); torchrun "
        "then stopped the others",
        "at_s": None,
        "victims": sorted(r.rank for r in ranks if r.run_id == run_id and r.rank not in (None, first.rank))[:16],
        "runs_failed": 1,
        "evidence": evidence,
    }
