"""Restart cycles as attempts (docs/restart.md#in-the-log-and-the-audit): which rank caused each in-process
restart, and how long the restart took, from `cycle_started` / `cycle_ended`; and `--diff` of two
cycles (what was created or bound differently, config drift, hooks added twice).

Each rank keeps its cycles' records (`RankState.cycles`: cycle → the fields read); `attempts`
joins them over the ranks of a run, across processes too (a torchrun restart continues the same run
id's files as a new `attempt`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from lifecycle.audit._reads import CycleEnded, CycleStarted, SignalReceived
from lifecycle.audit._rules import RuleId
from lifecycle.audit._state import RankState


def _key(audit: RankState, cycle: int | None) -> tuple[int, int]:
    return audit.attempt_no, cycle or 0  # absent in older logs: cycle 0


def cycle_started(audit: RankState, rec: CycleStarted, ts: float) -> None:
    entry = audit.cycles.setdefault(_key(audit, rec.cycle), {})
    entry.update(
        resumed_step=rec.resumed_step,
        restart_s=rec.restart_s,
        ledger=rec.ledger,
        fingerprint=rec.fingerprint,
        hooks=rec.hooks,
        started_ts=ts,
    )
    _restart_timeouts(audit, rec.restart_timeouts)
    world, launched = rec.world_size, rec.launched_world_size
    if world is not None and launched is not None and world < launched:
        audit.flag(
            RuleId.WORLD_SHRUNK,
            f"cycle {rec.cycle} trained with {world} of the {launched} ranks launched: a rank was "
            "lost and min_world_size let the job go on smaller (a smaller data-parallel size, a different "
            "global batch); leave min_world_size out to keep the job whole",
        )


def _restart_timeouts(audit: RankState, found: dict[str, float | None] | None) -> None:
    """The restart wrapper's own timeouts join the rank's timeout map (DISTRIBUTED's `timeouts_read`)."""
    if found is None or audit.timeouts is None:
        return
    # nvrx's, in the order it applies them, then our own connection to its store's
    order = ("soft_s", "hard_s", "barrier_s", "completion_s", "heartbeat_s", "store_client_s")
    names = sorted(found, key=lambda n: (order.index(n) if n in order else len(order), n))
    read = tuple((n, found[n]) for n in names)
    audit.timeouts = audit.timeouts._replace(restart=read)


def cycle_ended(audit: RankState, rec: CycleEnded, ts: float) -> None:
    entry = audit.cycles.setdefault(_key(audit, rec.cycle), {})
    entry.update(cause_rank=rec.cause_rank, cause=rec.cause, fault_ts=rec.fault_ts, ended=True)


def process_ended(audit: RankState) -> None:
    """A new process attempt starts in this log: the last cycle of the one before ended with its
    process (killed, or stopped by the launcher), at the last record before it."""
    cycles = [k for k in audit.cycles if k[0] == audit.attempt_no]
    entry = audit.cycles.setdefault(max(cycles) if cycles else (audit.attempt_no, 0), {})
    if not entry.get("ended"):
        entry.update(ended=True, cause=f"process ended in {audit.state}", last_ts=audit.last_ts)
        failure = audit.failure  # a survivor that logged `peer_failed` named the rank that failed
        if failure is not None and failure.kind == "peer_failed" and failure.peer is not None:
            entry.update(cause_rank=failure.peer, cause=failure.message)
        elif audit.signalled is not None:  # stopped from outside (the launcher ending the survivors)
            entry.update(cause=f"stopped by {audit.signalled} in {audit.state}", signalled=True)
    audit.signalled = None


def signal_received(audit: RankState, rec: SignalReceived, ts: float) -> None:
    """A signal after the startup (engine/_failures.py `pass_on`): this rank was stopped from
    outside, so its log stopping is not what ended the attempt."""
    audit.signalled = str(rec.signal)[:40]


@dataclass(frozen=True, slots=True)
class Attempt:
    """One cycle of one process attempt, over every rank that logged it."""

    run_id: str | None
    attempt: int
    cycle: int
    ranks: tuple[int, ...]
    cause_rank: int | None
    cause: str | None
    restart_s: float | None  # from the fault of the cycle before to training again (slowest rank)
    resumed_step: int | None
    ended: bool

    @property
    def clean(self) -> bool:
        return not self.ended


def attempts(ranks: Iterable[RankState]) -> list[Attempt]:
    """Every (run, process attempt, cycle) logged, in order, joined over ranks."""
    joined: dict[tuple[str | None, int, int], list[tuple[int, dict[str, object]]]] = {}
    for audit in ranks:
        for (attempt, cycle), fields in audit.cycles.items():
            joined.setdefault((audit.run_id, attempt, cycle), []).append((audit.rank or 0, fields))
    out = []
    for (run_id, attempt, cycle), rows in sorted(joined.items(), key=lambda kv: (str(kv[0][0]), kv[0][1], kv[0][2])):
        ended = [f for _, f in rows if f.get("ended")]
        causes = [c for f in ended if isinstance(c := f.get("cause_rank"), int)]
        stopped = [(t, r) for r, f in rows if isinstance(t := f.get("last_ts"), float) and not f.get("signalled")]
        if not causes and stopped:  # a process attempt: the rank whose log stopped first, not stopped by a signal
            causes = [min(stopped)[1]]
        restart = [r for _, f in rows if isinstance(r := f.get("restart_s"), (int, float))]
        steps = [n for _, f in rows if isinstance(n := f.get("resumed_step"), int)]
        out.append(
            Attempt(
                run_id=run_id,
                attempt=attempt,
                cycle=cycle,
                ranks=tuple(sorted(r for r, _ in rows)),
                cause_rank=min(causes, key=causes.count) if causes else None,
                cause=next((str(f.get("cause")) for f in ended if f.get("cause")), None),
                restart_s=max(restart) if restart else None,
                resumed_step=min(steps) if steps else None,
                ended=bool(ended),
            )
        )
    return out


def attempt_lines(found: Sequence[Attempt]) -> list[str]:
    lines = []
    for a in found:
        head = f"attempt {a.attempt} cycle {a.cycle} (ranks {len(a.ranks)})"
        resumed = f", resumed at step {a.resumed_step}" if a.resumed_step else ""
        took = f", restart took {a.restart_s:.2f} s" if a.restart_s is not None else ""
        who = a.cause_rank if a.cause_rank is not None else "?"
        end = f": ended by rank {who} ({a.cause or 'no cause published'})" if a.ended else ": clean"
        lines.append(f"{head}{took}{resumed}{end}")
    return lines


def diff(ranks: Iterable[RankState], first: int, second: int) -> list[str]:
    """What differs between cycles `first` and `second` (latest process attempt), per rank."""
    out = []
    for audit in sorted(ranks, key=lambda a: a.rank or 0):
        a, b = _latest(audit, first), _latest(audit, second)
        if a is None or b is None:
            out.append(f"rank {audit.rank}: cycle {first if a is None else second} not logged")
            continue
        out += [f"rank {audit.rank}: {line}" for line in _diff_fields(a, b, first, second)]
    return out or [f"cycles {first} and {second}: no difference"]


def _latest(audit: RankState, cycle: int) -> dict[str, object] | None:
    keys = [k for k in audit.cycles if k[1] == cycle]
    return audit.cycles[max(keys)] if keys else None


def _diff_fields(a: dict[str, object], b: dict[str, object], first: int, second: int) -> list[str]:
    lines = []
    la, lb = _listed(a.get("ledger")), _listed(b.get("ledger"))
    for name in [x for x in lb if x not in la]:
        lines.append(f"created in cycle {second} only: {name}")
    for name in [x for x in la if x not in lb]:
        lines.append(f"created in cycle {first} only: {name}")
    if a.get("fingerprint") != b.get("fingerprint"):
        lines.append(f"config drift: fingerprint {a.get('fingerprint')} -> {b.get('fingerprint')}")
    ha, hb = _hooks(a.get("hooks")), _hooks(b.get("hooks"))
    for name in sorted(set(ha) | set(hb)):
        if ha.get(name) != hb.get(name):
            twice = " (added again: not released)" if (hb.get(name) or 0) > (ha.get(name) or 0) else ""
            lines.append(f"{name}: {ha.get(name)} in cycle {first}, {hb.get(name)} in cycle {second}{twice}")
    return lines


def _listed(value: object) -> list[object]:
    """A cycle's `ledger` (names of what it created) as a list; none when the record has none."""
    return list(value) if value and isinstance(value, Iterable) else []


def _hooks(value: object) -> Mapping[str, int]:
    """A cycle's `hooks` (hook name -> times registered); none when the record has none."""
    return value if value and isinstance(value, dict) else {}
