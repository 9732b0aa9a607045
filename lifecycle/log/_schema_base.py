"""The envelope every record carries (`Record`), the base of every event's type (`lifecycle.log.schema`).

A writer builds an event's struct with the event's own fields only (`ModelBuilt(chunks=1, ...)`) and
hands it to `AuditLog.write`, which adds the envelope. So the envelope's fields have placeholder
defaults (0, "") that no written record keeps: a value a writer gives one is not written (the log's
own run, rank, clock and chain are). An event may declare an envelope name again as its own field
(`cycle_started` does `world_size`); then the record's value is written.
"""

from __future__ import annotations

import inspect
from types import MappingProxyType, UnionType
from typing import Annotated, Final, NamedTuple, Union, get_args, get_origin, get_type_hints

import msgspec
from msgspec import UNSET, Meta, UnsetType

EVENT_MEANING: Final = "one of the names in `lifecycle/log/events.py`"


class Record(msgspec.Struct, frozen=True, kw_only=True, tag_field="event"):
    """The fields every record has (the envelope). `event` is the tag that picks the record's type:
    each event's struct subclasses this one with `tag=<event name>`."""

    ts: Annotated[float, Meta(description="wall-clock time, Unix seconds")] = 0.0
    seq: Annotated[int, Meta(description="0, 1, 2, ... per file, no gaps")] = 0
    run_id: Annotated[str, Meta(description="same on every rank of one run")] = ""
    rank: Annotated[int, Meta(description="global rank")] = 0
    world_size: Annotated[int, Meta(description="number of ranks")] = 0
    generation: Annotated[int, Meta(description="0, then +1 at every `restart` (also one whose release failed)")] = 0
    cycle: Annotated[
        int | UnsetType,
        Meta(
            description="the in-process restart cycle ([restart.md](restart.md)): 0, then +1 each time the restart "
            "wrapper calls the training function again; 0 without it (older logs lack the field: read it as 0)"
        ),
    ] = UNSET
    prev_hash: Annotated[str, Meta(description="`hash` of the previous record of this file; 64 zeros for `seq` 0")] = ""
    hash: Annotated[
        str,
        Meta(description="SHA-256 hex of `orjson.dumps(record_without_hash, option=orjson.OPT_SORT_KEYS)`"),
    ] = ""


class Field(NamedTuple):
    """One field of a record type, as the docs and the tests read it."""

    name: str
    type: str  # as written in Python, `UnsetType` left out
    meaning: str
    optional: bool  # only sometimes present (its default is UNSET)


def type_text(tp: object) -> str:
    """`tp` as written in Python (`int | None`, `list[str]`), without `Annotated` and `UnsetType`."""
    if get_origin(tp) is Annotated:
        return type_text(get_args(tp)[0])
    if get_origin(tp) in (Union, UnionType):
        return " | ".join(type_text(arg) for arg in get_args(tp) if arg is not UnsetType)
    if tp is type(None):
        return "None"
    if (origin := get_origin(tp)) is not None:
        return f"{getattr(origin, '__name__', origin)}[{', '.join(type_text(arg) for arg in get_args(tp))}]"
    return str(getattr(tp, "__name__", tp))


def described(cls: type[msgspec.Struct]) -> tuple[Field, ...]:
    """The fields `cls` declares itself (not those it inherits), in their order, each with its meaning."""
    hints = get_type_hints(cls, include_extras=True)
    out = []
    for name in inspect.get_annotations(cls):
        hint = hints[name]
        meaning = next((m.description for m in get_args(hint)[1:] if isinstance(m, Meta)), None) or ""
        out.append(Field(name, type_text(hint), meaning, UnsetType in get_args(get_args(hint)[0])))
    return tuple(out)


_BODIES: dict[type[Record], tuple[str, tuple[str, ...]]] = {}


def body_fields(cls: type[Record]) -> tuple[str, tuple[str, ...]]:
    """`cls`'s event and the fields its writer gives: all but the envelope's (an
    envelope name `cls` declares again is its own). Computed once per type: the writer asks per record."""
    known = _BODIES.get(cls)
    if known is None:
        own = inspect.get_annotations(cls)
        names = tuple(name for name in cls.__struct_fields__ if name not in Record.__struct_fields__ or name in own)
        known = _BODIES[cls] = (str(cls.__struct_config__.tag), names)
    return known


ENVELOPE: Final = MappingProxyType({"event": EVENT_MEANING, **{f.name: f.meaning for f in described(Record)}})
"""The envelope's fields (added by the writer, `lifecycle/log/_writer.py`), each with its meaning."""
