"""`lifecycle audit --format verdict`: one small versioned JSON document a supervisor can act on
(docs/log-format.md#the-verdict): the culprit rank and host, the state and the phase, the class of
the failure and what to do about it, and the records that show it.

The class decides the action:
- `config`: deterministic (a refused setting, two worlds at one endpoint, a binding that does not
  match, a group's own timeout shorter than the budget): retrying the same launch cannot help, so STOP;
- `infrastructure`: a rank lost or killed, a hung rank, a store host gone, a rendezvous or state
  timeout, a full disk, the job stopped from outside: RESTART, without the hosts named in
  `exclude_hosts` (the culprit's host when the rank was lost or hung there);
- `user-code`: an exception raised by the provider, a hook or the training step, or a wait that failed
  in the first step after a group was made while training (LA029: some rank skipped its lazy first
  collective, and will again): STOP, and fix it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lifecycle.audit import _outcome
from lifecycle.audit._cause import RootCause
from lifecycle.audit._groups import SHORTER
from lifecycle.audit._launches import LaunchRead
from lifecycle.audit._rank import RankAudit
from lifecycle.audit._records import EXHAUSTED, Failure, Finding
from lifecycle.audit._rules import RuleId
from lifecycle.audit._verdict_launch import launch_verdict, unheard
from lifecycle.errors import LogUnreadable
from lifecycle.log import JSONValue

if TYPE_CHECKING:
    from lifecycle.audit._audit import AuditResult

VERSION = 1
"""The verdict's schema version: a field added keeps it, a field renamed or removed bumps it."""


def ours(head: bytes) -> bool:
    """An existing output file is one of our verdicts, which `write_output` may replace: it begins
    with our version and outcome, as `verdict` writes them (another tool's `{"verdict": ...` does not)."""
    return _OURS.match(head) is not None


_OURS = re.compile(rb'\{"verdict": \d+, "outcome": "[a-z]+"')


ACTIONS = {"config": "STOP", "infrastructure": "RESTART", "user-code": "STOP"}
CONFIG_ERRORS = frozenset(
    {
        "ConfigError",
        "ConfigMutated",
        "GuardRejected",
        "InvalidTransition",
        "BindingError",
        "BindingConflict",
        "SettingsNotLanded",
        "ExtraNotInstalled",
        "ProviderError",
    }
)
INFRASTRUCTURE_ERRORS = frozenset(
    {
        "RankFailed",
        "OSError",
        "TimeoutError",
        "ConnectionError",
        "ConnectionResetError",
        "ConnectionRefusedError",
        "BrokenPipeError",
        "DistStoreError",
        "DistNetworkError",
        "DistBackendError",
        "LogWriteFailed",
        "StartupAborted",
        "SignalException",
        "KeyboardInterrupt",
    }
)
_DISTRIBUTED_FIELDS = {
    "parallel.world_size": "config",
    "startup.timeout_s": "infrastructure",
    "startup": "infrastructure",
    "process_group.timeout": "config",  # a group's own timeout, shorter than the budget, fired: it will again
}
_LOST = ("died", "peer")  # the culprit itself is gone or silent (a timeout names the one who waited)
OWN = ("failed", "timeout", EXHAUSTED)
"""Root causes a rank's own record shows (a log that only stops, `died`, does not say when its process ended)."""
_EVIDENCE = 5


def classify(kind: str, failure: Failure | None) -> str:
    """`config`, `infrastructure` or `user-code`, from the root cause's kind and its first failure."""
    if kind not in ("failed", EXHAUSTED) or failure is None:
        return "infrastructure"  # died, timed out, named by peers only, or stopped from outside
    error_type, field = failure.error_type or "", failure.field or ""
    if kind == EXHAUSTED and (failure.kind != EXHAUSTED or not error_type):
        return "infrastructure"  # the wrapper's culprit was stopped or lost: it published no error of its own
    if error_type == "DistributedError":
        return _DISTRIBUTED_FIELDS.get(field, "user-code")  # else: a process group someone else made
    if error_type in CONFIG_ERRORS:
        return "config"
    if error_type in INFRASTRUCTURE_ERRORS or "No space left on device" in failure.message:
        return "infrastructure"
    return "user-code"


def _culprit_stream(ranks: Sequence[RankAudit], cause: RootCause) -> RankAudit | None:
    """The root cause's rank; when no rank failed on its own (every one stopped by a signal from
    outside), the first one stopped."""
    run = [r for r in ranks if r.run_id == cause.run_id]
    if cause.rank is not None or cause.kind == EXHAUSTED:  # the wrapper named none: no rank is blamed
        return next((r for r in run if r.rank == cause.rank), None)
    stopped = [r for r in run if r.failure is not None and r.failure.kind == "aborted"]  # not a restart's victim
    stopped = stopped or [r for r in run if r.failure is not None]
    return min(
        stopped, key=lambda r: (r.failure.ts if r.failure and r.failure.ts else float("inf"), r.rank or 0), default=None
    )


def _short(finding: Finding) -> bool:
    """An LA028 finding of a group whose timeout is shorter than `startup.timeout_s`."""
    return finding.rule == RuleId.GROUP_TIMEOUT and SHORTER in finding.message


_SKIPPED = (
    "was made after CALLBACKS_BOUND (LA029): a rank that skips its first collective (lazy: it makes the "
    "communicator) leaves the others waiting"
)


def _fresh_group(ranks: Sequence[RankAudit], run_id: str | None, culprit: RankAudit | None) -> str | None:
    """A group made after CALLBACKS_BOUND with no step completed since, when a rank of the run failed
    (the culprit's first, else a victim's: the rank that skipped the group's making has none)."""
    run = [culprit] if culprit is not None else []
    run += [r for r in ranks if r.run_id == run_id and r is not culprit]
    return next((r.failure.new_group for r in run if r.failure is not None and r.failure.new_group), None)


def _judged(
    kind: str, failure: Failure | None, mine: Sequence[Finding], fresh: str | None, reason: str
) -> tuple[str, str]:
    """The class, and the reason (the root cause's message, with a lazy group named when it is the likely cause)."""
    klass = classify(kind, failure)
    if klass == "infrastructure" and kind in ("failed", "timeout") and any(map(_short, mine)):
        return "config", reason  # a wait that outlived a group timeout shorter than the budget: it will again
    if klass == "infrastructure" and kind in ("failed", "timeout") and fresh is not None:
        # a group made while training that some rank never joined: a restart hangs there again (docs/failures.md)
        return "user-code", f"{reason}; in the first step after {fresh} {_SKIPPED}"
    return klass, reason


def _wrapper_said(ranks: Sequence[RankAudit], cause: RootCause) -> Failure | None:
    """A `restarts_exhausted` of the run, for the class of the fault it names when the culprit's own log
    holds none (its rank left no log)."""
    return next(
        (r.failure for r in ranks if r.run_id == cause.run_id and r.failure and r.failure.kind == EXHAUSTED), None
    )


def _repeated(ranks: Sequence[RankAudit], run_id: str | None, error_type: str | None) -> str:
    """`; the same <type> ended each of the N cycles` when every cycle a rank logged ended with that
    error type (a user-code error repeating: restarting cannot help); else nothing."""
    if not error_type:
        return ""
    ends = [
        str(fields.get("cause") or "").partition(":")[0].strip()
        for r in ranks
        if r.run_id == run_id
        for fields in r.cycles.values()
        if fields.get("ended")
    ]
    return f"; the same {error_type} ended every cycle" if ends and set(ends) == {error_type} else ""


def _host_of(ranks: Sequence[RankAudit], run_id: str | None, rank: int) -> str | None:
    return next((r.host for r in ranks if r.run_id == run_id and r.rank == rank), None)


def verdict(
    causes: Sequence[RootCause],
    ranks: Sequence[RankAudit],
    findings: Sequence[Finding],
    *,
    unreadable: int = 0,
    errors: Sequence[LogUnreadable] = (),
    launches: LaunchRead | None = None,
) -> dict[str, JSONValue]:
    """The verdict: `unreadable` or `tampered` when the records cannot be read or trusted; `failed`
    on the first run that failed (its root cause); `stopped` when ranks were only stopped from
    outside; `clean` only when every rank's own clean end is in the logs and no finding stands
    (`flagged`: they ended, and a rule is violated); else `incomplete`. `EXIT` maps each to the
    audit's exit status."""
    doc: dict[str, JSONValue] = {"verdict": VERSION}
    counts: dict[str, JSONValue] = {"findings": len(findings), "ranks": len(ranks)}
    launched = launches or LaunchRead([], [], [])
    errors = [*errors, *launched.errors]
    if errors or unreadable or not ranks:
        return doc | _outcome.unreadable_doc(errors) | counts
    broken = _outcome.tampered(ranks)
    if broken or launched.broken:
        return doc | _outcome.tampered_doc(broken, launched.broken) | counts
    own = [c for c in causes if c.kind in OWN]
    if own:  # a rank's own record shows it failing: the logs decide
        return doc | _failed(causes, ranks, findings) | counts
    run_id = causes[0].run_id if causes else ranks[0].run_id
    said = launch_verdict(ranks, launched.launches, run_id)
    if said is not None:  # torchrun saw who ended first, or the launcher itself was stopped
        return doc | said | counts
    waiting = unheard(ranks, launched.launches, run_id)  # a log that only stops proves no death here
    if causes and not (waiting and any(c.kind == "died" for c in causes)):
        return doc | _failed(causes, ranks, findings) | counts
    runs = _outcome.ends(ranks)
    if all(run.proven for run in runs):
        if findings:
            rules = sorted({f.rule for f in findings})
            return doc | {"outcome": "flagged", "class": None, "action": "STOP", "rules": rules} | counts
        return doc | {"outcome": "clean"} | counts
    run = next(run for run in runs if not run.proven)
    if run.short and run.signalled and not run.missing_count and not waiting:
        return doc | _outcome.died_doc(run) | counts
    if run.signalled and not run.short and not run.missing_count and not waiting:
        return doc | _outcome.stopped_doc(run, None, None) | counts
    return doc | _outcome.incomplete_doc(runs, waiting) | counts


def judge(result: AuditResult) -> dict[str, JSONValue]:
    """The verdict on an audit's result: its root causes, ranks, findings, unreadable inputs and the
    launchers' records."""
    launched = LaunchRead(list(result.launches), [], list(result.launch_broken))
    return verdict(result.root_causes, result.ranks, result.findings, errors=result.errors, launches=launched)


EXIT = {
    "clean": 0,
    "flagged": 1,
    "failed": 1,
    "stopped": 1,
    "incomplete": 1,
    "tampered": 1,
    "unreadable": 2,
}
"""The exit status of `lifecycle audit --format verdict` for each outcome: they never disagree."""


def _failed(
    causes: Sequence[RootCause], ranks: Sequence[RankAudit], findings: Sequence[Finding]
) -> dict[str, JSONValue]:
    """The first failed run's root cause: `failed`, or `stopped` when its culprit was stopped by a signal."""
    cause = min(causes, key=lambda c: (c.at is None, c.at or 0.0))
    stream = _culprit_stream(ranks, cause)
    failure = stream.failure if stream is not None else None
    kind = cause.kind
    mine = [f for f in findings if f.rank == cause.rank and f.run_id == cause.run_id]
    judged = _wrapper_said(ranks, cause) if kind == EXHAUSTED and failure is None else failure
    klass, reason = _judged(kind, judged, mine, _fresh_group(ranks, cause.run_id, stream), cause.message)
    if kind == EXHAUSTED:
        reason += _repeated(ranks, cause.run_id, judged.error_type if judged is not None else None)
    host = stream.host if stream is not None else None
    culprit = stream.rank if stream is not None else cause.rank
    if failure is not None and failure.missing:  # a rendezvous timeout: the ranks that never came are the culprits
        culprit, host = failure.missing[0], _host_of(ranks, cause.run_id, failure.missing[0])
    # stopped from outside (a signal in the startup, or after it), and no rank failed on its own
    signal = failure.signal if failure is not None and failure.kind == "aborted" else None
    signal = signal or (stream.signalled if stream is not None and failure is None else None)
    stopped = signal is not None
    doc: dict[str, JSONValue] = {
        "outcome": "stopped" if stopped else "failed",
        "run_id": cause.run_id,
        "culprit": {"rank": culprit, "host": host},
    }
    if stopped:
        doc |= {"signal": signal, "sender": None}
    return doc | {
        "missing": list(failure.missing) if failure is not None else [],
        "state": failure.state if failure is not None else stream.state if stream is not None else None,
        "phase": failure.trigger if failure is not None else stream.open_trigger if stream is not None else None,
        "class": klass,
        "action": ACTIONS[klass],
        "exclude_hosts": [host] if klass == "infrastructure" and host and cause.kind in _LOST else [],
        "reason": reason,
        "at_s": cause.at,
        "victims": [v.rank for v in cause.victims],
        "runs_failed": len(causes),
        "evidence": _evidence(cause, mine),
    }


def _evidence(cause: RootCause, mine: Sequence[Finding]) -> list[dict[str, JSONValue]]:
    """The culprit's failure record, then the findings on its rank (LA018 is the cause itself)."""
    shown = [f for f in mine if f.rule != RuleId.ROOT_CAUSE][:_EVIDENCE]
    out: list[dict[str, JSONValue]] = [
        {"source": cause.source, "line": cause.line, "rank": cause.rank, "kind": cause.kind}
    ]
    return out + [{"source": f.source, "line": f.line, "rank": f.rank, "rule": f.rule} for f in shown]
