"""What the export reads of each record, typed by the log's schema (`lifecycle.log.schema.read_type`),
as the audit reads its own fields (`lifecycle/audit/_typed.py`).

Each reader declares the fields it reads by event: `READS` (the details: `_details`, the live spans)
and `FOLLOWS` (`export --follow`). A record parsed by orjson is converted (`msgspec.convert`, C) to a
struct of exactly those fields, each of its schema type or None where the record lacks it; a field
it did not declare raises AttributeError (`get`). A record whose field has another type is
unreadable: LogUnreadable `file:line: <event>: field 'x' is ..., expected <type>`, as the audit
refuses one (exit status 2).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple, cast

import msgspec

from lifecycle.errors import LogUnreadable
from lifecycle.log import JSONValue, events, records
from lifecycle.log.schema import SCHEMA, not_of_type, read_fields


class Shown(NamedTuple):
    """How a record drawn as an instant is shown: its kind (`violation`, `failure`), the fields of its
    one-line detail in their order, and the field that names the state it happened in."""

    kind: str
    detail: tuple[str, ...]
    state: str | None


MARKS: Mapping[str, Shown] = {
    events.TRIPWIRE_VIOLATION: Shown("violation", ("target", "kind", "trigger"), "state"),
    events.SIDE_EFFECT_REFUSED: Shown("violation", ("kind", "reason", "trigger"), "state"),
    events.GUARD_REJECTED: Shown("violation", ("guard", "reason", "trigger"), "source"),
    events.INVALID_TRANSITION: Shown("violation", ("trigger",), "source"),
    events.CONFIG_MUTATED: Shown("violation", ("field",), None),
    events.FIRST_STEP_NOT_FINALIZED: Shown("violation", ("finalizer_calls",), None),
    events.PEER_FAILED: Shown("failure", ("error", "peer_rank", "peer_state"), "peer_state"),
    events.STATE_TIMEOUT: Shown("failure", ("missing", "trigger"), "state"),
    events.STARTUP_ABORTED: Shown("failure", ("signal", "trigger"), "state"),
    events.SIGNAL_RECEIVED: Shown("failure", ("signal",), "state"),
    events.TRANSITION_FAILED: Shown("failure", ("field", "error_type", "error", "trigger"), "source"),
    events.LOG_WRITE_FAILED: Shown("failure", ("error",), None),
}
"""Events drawn as instants, and how each is shown."""

READS: Mapping[str, tuple[str, ...]] = {
    events.STEP_COMPLETED: ("duration_s", "loss", "step"),
    events.LIFECYCLE_STARTED: ("attempt", "host", "pid", "plan", "restart_count"),
    events.CONFIG_VALIDATED: ("fingerprint",),
    events.DISTRIBUTED_INITIALIZED: ("cp", "dp", "ep", "pp", "ranks", "tp", "vpp"),
    events.GENERATION_STARTED: ("generation",),
    **{event: tuple(dict.fromkeys((*shown.detail, *filter(None, (shown.state,))))) for event, shown in MARKS.items()},
}
"""By event: the fields the details read (`_details._take`) besides `rank` and `ts`; a
`config_validated`'s `config` too where the configs are kept (`CONFIG`)."""
CONFIG = "config"

FOLLOWS: Mapping[str, tuple[str, ...]] = {
    events.LIFECYCLE_STARTED: ("attempt",),
    events.TRANSITION_STARTED: ("trigger",),
    events.TRANSITION_COMPLETED: ("dest", "trigger"),
    events.TRANSITION_FAILED: ("error",),
    events.STARTUP_ABORTED: ("signal", "state"),
    events.SIGNAL_RECEIVED: ("signal", "state"),
    events.PEER_FAILED: ("error",),
    events.STATE_TIMEOUT: ("state",),
}
"""By event: the fields `export --follow` reads besides the envelope's (`FOLLOWED`); what ends a
rank's root span says why in this order (`state` last)."""
FOLLOWED = ("rank", "run_id", "ts", "world_size")
"""The envelope's fields `export --follow` reads of every record (none checked there: None when absent)."""


class Read(msgspec.Struct, gc=False):
    """A record as the export reads it: `rank` and `ts` (the details') and the fields its reader
    declared, each of its type in the log's schema or None where the record lacks it (`get`)."""

    if TYPE_CHECKING:
        rank: int
        ts: float

        def get(self, key: str, /) -> JSONValue: ...

    else:
        get = object.__getattribute__  # C; a field its reader did not declare raises AttributeError


class Followed(msgspec.Struct, gc=False):
    """A record as `export --follow` reads it: `FOLLOWED` and the fields `FOLLOWS` declares for its
    event, each of its schema type or None where the record lacks it (`get`)."""

    if TYPE_CHECKING:
        event: str
        rank: int | None
        run_id: str | None
        ts: float | None
        world_size: int | None

        def get(self, key: str, /) -> JSONValue: ...

    else:
        get = object.__getattribute__


_ENVELOPE = {f.name: f.type for f in msgspec.structs.fields(records.Record)}


def _struct(
    base: type[Read | Followed], event: str, names: Iterable[str], kept: Iterable[str] = (), *, tag: bool = False
) -> type:
    """`base` with `kept` of the envelope as the schema types them (a record lacking one does not
    convert) and `names` of `event` typed by `read_type` (None when absent); `event` as an attribute,
    or with `tag` a field decoded with them (any record's)."""
    return msgspec.defstruct(
        f"{base.__name__}_{event}",
        [
            *((("event", str),) if tag else ()),
            *((name, _ENVELOPE[name]) for name in kept),
            *read_fields(event, names),
        ],
        bases=(base,),
        namespace={"get": base.get} | ({} if tag else {"event": event}),  # `get` in its own namespace: found first
        module=__name__,
        gc=False,
        kw_only=True,
    )


_HEAD = ("rank", "ts")
_TIMED = cast("type[Read]", _struct(Read, events.LIFECYCLE_STARTED, (), _HEAD))
_READ = {event: cast("type[Read]", _struct(Read, event, names, _HEAD)) for event, names in READS.items()}
_WITH_CONFIG = cast(
    "type[Read]", _struct(Read, events.CONFIG_VALIDATED, (CONFIG, *READS[events.CONFIG_VALIDATED]), _HEAD)
)
_ANY_STEP = _struct(Read, events.STEP_COMPLETED, READS[events.STEP_COMPLETED], _HEAD, tag=True)
_FOLLOW = {
    event: cast("type[Followed]", _struct(Followed, event, (*FOLLOWED, *FOLLOWS.get(event, ())))) for event in SCHEMA
}


def step_struct(*, event: bool) -> type:
    """A step as the details decode many at once (C): `rank`, `ts` and the fields `READS` declares for
    `step_completed`; with `event` any record, its event decoded too (a step's fields None where absent)."""
    return _ANY_STEP if event else _READ[events.STEP_COMPLETED]


def _refused(
    source: str, line: int, event: str, rec: Mapping[str, JSONValue], error: msgspec.ValidationError
) -> LogUnreadable:
    reason = not_of_type(event, rec, error)
    return LogUnreadable(f"{source}:{line}: {reason}", source=source, line=line, reason=reason)


def read(source: str, line: int, event: str | None, rec: JSONValue, *, configs: bool = False) -> Read | None:
    """Parsed record `rec` (line `line` of `source`) as the details read one of `event` (None: only
    its time); with `configs`, a `config_validated`'s config too. None when it is not an object with
    an int `rank` and a numeric `ts` (the audit refuses it); LogUnreadable when a field read is of
    another type."""
    typed = _TIMED if event is None else _WITH_CONFIG if configs and event == events.CONFIG_VALIDATED else _READ[event]
    try:
        return msgspec.convert(rec, typed)
    except msgspec.ValidationError as error:
        try:
            msgspec.convert(rec, _TIMED)
        except msgspec.ValidationError:
            return None  # no rank or time: the audit's to refuse, with its own words
        raise _refused(source, line, str(event), cast("dict[str, JSONValue]", rec), error) from None


def followed(source: str, line: int, rec: JSONValue) -> Followed | None:
    """Parsed record `rec` (line `line` of `source`) as `export --follow` reads it; None when it is
    not a record of a known event; LogUnreadable when a field read is of another type."""
    event = rec.get("event") if type(rec) is dict else None
    typed = _FOLLOW.get(event) if type(event) is str else None
    if typed is None:
        return None
    try:
        return msgspec.convert(rec, typed)
    except msgspec.ValidationError as error:
        raise _refused(source, line, str(event), cast("dict[str, JSONValue]", rec), error) from None
