"""The fields the handlers read, typed by the log's schema (`lifecycle.log.schema.read_type`): the
batch reader decodes them so (`_feed`), and a record parsed by orjson is converted to the same types
(`as_read`) before a handler sees it. So a handler gets each field it reads as its schema type, or
None where the record lacks it, on both paths; a record whose field has another type is unreadable
(`file:line: <event>: field 'x' is ..., expected <type>`), as the audit has always refused one
(docs/audit.md, exit status 2)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

import msgspec

from lifecycle.audit._handlers import READS
from lifecycle.audit._records import unreadable
from lifecycle.log import JSONValue
from lifecycle.log.schema import not_of_type, read_fields


class Typed(msgspec.Struct, gc=False):
    """The base of the record types the handlers read (`READ_TYPES`, and the batch path's)."""

    if TYPE_CHECKING:

        def get(self, key: str, /) -> JSONValue: ...

    else:
        get = object.__getattribute__  # C; a field its handler did not declare raises AttributeError


def _read_struct(event: str, names: tuple[str, ...]) -> type[Typed]:
    made = msgspec.defstruct(
        f"Read_{event}",
        read_fields(event, names),
        bases=(Typed,),
        namespace={"event": event, "get": Typed.get},  # `get` in its own namespace: found first
        module=__name__,
        gc=False,
        kw_only=True,
    )
    return cast("type[Typed]", made)  # defstruct says Struct; its base is Typed


READ_TYPES: dict[str, type[Typed]] = {event: _read_struct(event, names) for event, names in READS.items()}
"""By event: its handler's fields (`READS`), typed, and `event`; what a parsed record is converted to."""


def as_read(source: str, line: int, event: str, rec: Mapping[str, JSONValue]) -> Typed:
    """The fields of parsed record `rec` (of a known `event`) that its handler reads, as their types;
    LogUnreadable naming the event and the field when one has another type."""
    try:
        return msgspec.convert(rec, READ_TYPES[event])
    except msgspec.ValidationError as error:
        raise unreadable(source, line, not_of_type(event, rec, error)) from None
