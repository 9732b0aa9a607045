"""The envelope every record carries (`Record`), the base of every event's type (`lifecycle.log.schema`)."""

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

    ts: Annotated[float, Meta(description="wall-clock time, Unix seconds")]
    seq: Annotated[int, Meta(description="0, 1, 2, ... per file, no gaps")]
    run_id: Annotated[str, Meta(description="same on every rank of one run")]
    rank: Annotated[int, Meta(description="global rank")]
    world_size: Annotated[int, Meta(description="number of ranks")]
    generation: Annotated[int, Meta(description="0, then +1 at every `restart` (also one whose release failed)")]
    cycle: Annotated[
        int | UnsetType,
        Meta(
            description="the in-process restart cycle ([restart.md](restart.md)): 0, then +1 each time the restart "
            "wrapper calls the training function again; 0 without it (older logs lack the field: read it as 0)"
        ),
    ] = UNSET
    prev_hash: Annotated[str, Meta(description="`hash` of the previous record of this file; 64 zeros for `seq` 0")]
    hash: Annotated[
        str,
        Meta(description="SHA-256 hex of `orjson.dumps(record_without_hash, option=orjson.OPT_SORT_KEYS)`"),
    ]


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


ENVELOPE: Final = MappingProxyType({"event": EVENT_MEANING, **{f.name: f.meaning for f in described(Record)}})
"""The envelope's fields (added by the writer, `lifecycle/log/_writer.py`), each with its meaning."""
