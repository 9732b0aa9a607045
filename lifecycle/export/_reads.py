"""The export's one reader of records: a record becomes the struct its reader declares for its event,
each field as the log's schema types it (`schema.read_type`: None where absent), as the audit reads
its own (`lifecycle/audit/_reads.py`): `READ_TYPES` for the details (`_details`, the live spans), with
`rank` and `ts` required, `FOLLOW_TYPES` for `export --follow`. A parsed record is converted
(`msgspec.convert`, C); one whose field has another type is unreadable, as the audit refuses one:
LogUnreadable `file:line: <event>: field 'x' is ..., expected <type>` (exit 2); a test holds `READERS` to the schema."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, NamedTuple

import msgspec

from lifecycle.errors import LogUnreadable
from lifecycle.log import JSONValue, events
from lifecycle.log.schema import SCHEMA, not_of_type, read_fields


class Shown(NamedTuple):
    """How a record drawn as an instant is shown: its kind (`violation`, `failure`), the fields of its
    one-line detail in their order, and those that name the state it happened in and the peer rank."""

    kind: str
    detail: tuple[str, ...]
    state: str | None
    peer: str | None = None


MARKS: Mapping[str, Shown] = {
    events.TRIPWIRE_VIOLATION: Shown("violation", ("target", "kind", "trigger"), "state"),
    events.SIDE_EFFECT_REFUSED: Shown("violation", ("kind", "reason", "trigger"), "state"),
    events.GUARD_REJECTED: Shown("violation", ("guard", "reason", "trigger"), "source"),
    events.INVALID_TRANSITION: Shown("violation", ("trigger",), "source"),
    events.CONFIG_MUTATED: Shown("violation", ("field",), None),
    events.FIRST_STEP_NOT_FINALIZED: Shown("violation", ("finalizer_calls",), None),
    events.PEER_FAILED: Shown("failure", ("error", "peer_rank", "peer_state"), "peer_state", "peer_rank"),
    events.STATE_TIMEOUT: Shown("failure", ("missing", "trigger"), "state"),
    events.STARTUP_ABORTED: Shown("failure", ("signal", "trigger"), "state"),
    events.SIGNAL_RECEIVED: Shown("failure", ("signal",), "state"),
    events.TRANSITION_FAILED: Shown("failure", ("field", "error_type", "error", "trigger"), "source"),
    events.LOG_WRITE_FAILED: Shown("failure", ("error",), None),
}
"""Events drawn as instants, and how each is shown."""


class Read(msgspec.Struct, gc=False, kw_only=True):
    """A record as the details read it: its rank and time, as the envelope types them."""

    rank: int
    ts: float


class Step(Read, kw_only=True):  # a `step_completed`
    duration_s: float | None = None
    loss: float | None = None
    step: int | None = None


class AnyStep(Step, kw_only=True):  # any record, as the whole-file reader first decodes it
    event: str


class Started(Read, kw_only=True):  # a `lifecycle_started`
    attempt: int | None = None
    host: str | None = None
    pid: int | None = None
    plan: str | None = None
    restart_count: int | None = None


class Validated(Read, kw_only=True):  # a `config_validated`, without its config
    fingerprint: str | None = None


class Configured(Validated, kw_only=True):  # a `config_validated` with its config, where the configs are kept
    config: dict[str, object] | None = None


class Distributed(Read, kw_only=True):  # a `distributed_initialized`
    cp: int | None = None
    dp: int | None = None
    ep: int | None = None
    pp: int | None = None
    ranks: dict[str, int] | None = None
    tp: int | None = None
    vpp: int | None = None


class Generation(Read, kw_only=True):  # a `generation_started`
    generation: int | None = None


class Marked(Read, kw_only=True):  # a record drawn as an instant: its event's struct has the fields shown
    event: ClassVar[str]


def _marked(event: str, shown: Shown) -> type[Marked]:
    fields = read_fields(event, {*shown.detail, *filter(None, (shown.state, shown.peer))})
    made = msgspec.defstruct(f"Marked_{event}", fields, bases=(Marked,), namespace={"event": event}, module=__name__)
    assert issubclass(made, Marked)  # defstruct says Struct; its base is Marked
    return made


READ_TYPES: Mapping[str, type[Read]] = {
    events.STEP_COMPLETED: Step,
    events.LIFECYCLE_STARTED: Started,
    events.CONFIG_VALIDATED: Validated,
    events.DISTRIBUTED_INITIALIZED: Distributed,
    events.GENERATION_STARTED: Generation,
    **{event: _marked(event, shown) for event, shown in MARKS.items()},
}
"""By event: the struct the details read its records as (`config_validated`'s config: `Configured`)."""


class Followed(msgspec.Struct, gc=False, kw_only=True):
    """A record as `export --follow` reads it: its event and envelope (None where absent), and per event more."""

    event: str
    rank: int | None = None
    run_id: str | None = None
    ts: float | None = None
    world_size: int | None = None


class FollowedStart(Followed):  # a `lifecycle_started`
    attempt: int | None = None


class FollowedTransition(Followed):  # a `transition_started`
    trigger: str | None = None


class FollowedCompleted(Followed):  # a `transition_completed`
    dest: str | None = None
    trigger: str | None = None


class FollowedError(Followed):  # a `transition_failed` or a `peer_failed`: a rank's end, and why
    error: str | None = None


class FollowedSignal(Followed):  # a `startup_aborted` or a `signal_received`: a rank's end, its signal, state
    signal: str | None = None
    state: str | None = None


class FollowedTimeout(Followed):  # a `state_timeout`: a rank's end, the state it waited in
    state: str | None = None


_FOLLOWS: Mapping[str, type[Followed]] = {
    events.LIFECYCLE_STARTED: FollowedStart,
    events.TRANSITION_STARTED: FollowedTransition,
    events.TRANSITION_COMPLETED: FollowedCompleted,
    events.TRANSITION_FAILED: FollowedError,
    events.PEER_FAILED: FollowedError,
    events.STARTUP_ABORTED: FollowedSignal,
    events.SIGNAL_RECEIVED: FollowedSignal,
    events.STATE_TIMEOUT: FollowedTimeout,
}
FOLLOW_TYPES: Mapping[str, type[Followed]] = {event: _FOLLOWS.get(event, Followed) for event in SCHEMA}
"""By event: the struct `export --follow` reads its records as."""

READERS: tuple[tuple[str, type[msgspec.Struct]], ...] = (
    *READ_TYPES.items(),
    (events.CONFIG_VALIDATED, Configured),
    (events.STEP_COMPLETED, AnyStep),
    *FOLLOW_TYPES.items(),
)
"""Each event with each struct a record of it is read as."""


def _refused(
    source: str, line: int, event: str, rec: Mapping[str, JSONValue], error: msgspec.ValidationError
) -> LogUnreadable:
    reason = not_of_type(event, rec, error)
    return LogUnreadable(f"{source}:{line}: {reason}", source=source, line=line, reason=reason)


def read(source: str, line: int, event: str | None, rec: JSONValue, *, configs: bool = False) -> Read | None:
    """Parsed record `rec` (line `line` of `source`) as the details read one of `event` (None: only
    its rank and time); with `configs`, a `config_validated`'s config too. None when it is not an
    object with an int `rank` and a numeric `ts` (the audit refuses it); LogUnreadable when a field
    read is of another type."""
    typed = Read if event is None else Configured if configs and event == events.CONFIG_VALIDATED else READ_TYPES[event]
    if not isinstance(rec, dict):
        return None  # not a record: the audit's to refuse
    try:
        return msgspec.convert(rec, typed)
    except msgspec.ValidationError as error:
        try:
            msgspec.convert(rec, Read)
        except msgspec.ValidationError:
            return None  # no rank or time: the audit's to refuse, with its own words
        raise _refused(source, line, str(event), rec, error) from None


def followed(source: str, line: int, rec: JSONValue) -> Followed | None:
    """Parsed record `rec` (line `line` of `source`) as `export --follow` reads it; None when it is
    not a record of a known event; LogUnreadable when a field read is of another type."""
    if not isinstance(rec, dict):
        return None
    match rec:
        case {"event": str(event)} if event in FOLLOW_TYPES:
            try:
                return msgspec.convert(rec, FOLLOW_TYPES[event])
            except msgspec.ValidationError as error:
                raise _refused(source, line, event, rec, error) from None
    return None
