"""Per-event handlers of the records that say a rank stopped short: a signal, a peer's failure, a
timeout. Each keeps the rank's first failure (`RankState.fail`) for LA013 and the root cause."""

from __future__ import annotations

from lifecycle.audit._reads import PeerFailed, ResourceLeaked, RestartsExhausted, StartupAborted, StateTimeout
from lifecycle.audit._records import VICTIM_KINDS, Failure
from lifecycle.audit._rules import RuleId
from lifecycle.audit._state import RankState


def _during(audit: RankState) -> str:
    return f" during {audit.open_trigger!r}" if audit.open_trigger else ""


def fail(
    audit: RankState,
    kind: str,
    ts: float,
    message: str,
    *,
    state: str | None = None,
    trigger: str | None = None,
    peer: int | None = None,
    signal: str | None = None,
    error_type: str | None = None,
    field: str | None = None,
    missing: tuple[int, ...] = (),
    peer_lost: bool = False,
) -> None:
    """Keep this failure of the rank (`RankState.fail`: the first one counts) at the record being
    read: in the rank's state now and during its open trigger unless `state`/`trigger` say otherwise."""
    fresh = _fresh_group(audit)
    audit.fail(
        Failure(
            kind=kind,
            ts=ts,
            line=audit.line,
            message=message,
            state=audit.state if state is None else state,
            trigger=audit.open_trigger if trigger is None else trigger,
            peer=peer,
            signal=signal,
            error_type=error_type,
            field=field,
            missing=missing,
            peer_lost=peer_lost,
            new_group=fresh[1] if fresh is not None else None,
            outside=fresh is not None and fresh[2],
        )
    )


def _fresh_group(audit: RankState) -> tuple[int, str, bool] | None:
    """The group made after CALLBACKS_BOUND (LA029) if no step completed since it was made."""
    fresh = audit.fresh_group
    return fresh if fresh is not None and fresh[0] == audit.bound_steps else None


RESTART_REQUESTS = ("RankShouldRestart",)
"""What an in-process restart wrapper raises into a rank that did not fail itself (nvidia-resiliency-ext's):
the rank is a victim of another's fault, never the culprit."""


def restart_request(error_type: str | None, message: str | None) -> bool:
    """A failure that is the restart wrapper's request, by the error's type or, chained under another
    (the engine's PhaseFailed), by its text."""
    return str(error_type) in RESTART_REQUESTS or any(name in str(message) for name in RESTART_REQUESTS)


def failed_transition(
    audit: RankState, ts: float, message: str, trigger: str | None, error_type: str | None, field: str | None
) -> None:
    """A `transition_failed`: the rank's failure, with the error's type and the config field it names
    (a restart wrapper's request: the rank is its peer's victim, kind `restart`)."""
    fail(
        audit,
        "restart" if restart_request(error_type, message) else "failed",
        ts,
        message,
        trigger=trigger,
        error_type=None if error_type is None else str(error_type)[:80],
        field=None if field is None else str(field)[:80],
    )


def startup_aborted(audit: RankState, rec: StartupAborted, ts: float) -> None:
    signal = str(rec.signal)[:40]
    state = str(rec.state or audit.state)[:40]
    fail(
        audit,
        "aborted",
        ts,
        f"startup aborted by {signal} in state {state}{_during(audit)}",
        state=state,
        signal=signal,
    )


def peer_failed(audit: RankState, rec: PeerFailed, ts: float) -> None:
    peer = rec.peer_rank
    message = (
        f"stopped in state {audit.state}{_during(audit)} because peer rank "
        f"{peer} failed in state {str(rec.peer_state)[:40]}: {str(rec.error)[:200]}"
    )
    doing = rec.trigger[:40] if rec.trigger else None  # its step (a phase's is the open trigger already)
    fail(audit, "peer_failed", ts, message, trigger=doing, peer=peer, peer_lost=rec.peer_kind == "lost")


def state_timeout(audit: RankState, rec: StateTimeout, ts: float) -> None:
    state = str(rec.state or audit.state)[:40]
    missing = rec.missing
    waiting = f", waiting for ranks {str(missing)[:120]}" if missing else ""
    trigger = rec.trigger
    during = f" during {str(trigger)[:40]!r}" if trigger else _during(audit)
    ranks = tuple(missing[:64]) if missing is not None else ()
    message = f"timed out after {rec.timeout_s} s in state {state}{during}{waiting}"
    fail(audit, "timeout", ts, message, state=state, trigger=str(trigger)[:40] if trigger else None, missing=ranks)


def restarts_exhausted(audit: RankState, rec: RestartsExhausted, ts: float) -> None:
    """The in-process restart wrapper gave up: its `cause_rank` is the culprit it names (the rank that
    failed first in the last cycle), and its `cause` (`Type: message`) gives the class. It takes the
    place of a victim's failure this rank logged in that cycle (a restart request, a peer's failure)."""
    peer, cause = rec.cause_rank, rec.cause
    error_type = cause.partition(":")[0].strip()[:80] if cause and ":" in cause else None
    who = f"rank {peer}: {cause[:200] if cause else 'no cause published'}" if peer is not None else "not published"
    message = f"in-process restart gave up after {rec.cycles} cycles ({rec.reason}); the last fault: {who}"
    if audit.failure is not None and audit.failure.kind in VICTIM_KINDS:
        audit.failure = None
    fail(audit, "exhausted", ts, message, peer=peer, error_type=error_type)


def resource_leaked(audit: RankState, rec: ResourceLeaked, ts: float) -> None:
    """A survivor of a rebuild's or restart's release, logged by the ledger (older logs: also of a
    shutdown, after its `lifecycle_shutdown`)."""
    leak(audit, rec.resource, rec.state)


def leak(audit: RankState, resource_: str | None, state_: str | None) -> None:
    """LA023: a resource the ledger found alive after its release or the shutdown."""
    resource, state = str(resource_)[:120], str(state_)[:40]
    after = "the lifecycle's shutdown" if audit.shut else "its release"
    audit.flag(
        RuleId.RESOURCE_LEAKED,
        f"{resource!r}, made by {state}, was still alive after {after}: something still holds it; "
        f"the release of {state} must destroy it",
    )
