"""A record parsed by orjson, read as its handler's struct (`as_read`): the fields the handler reads
(`_reads.READ_TYPES`), each as the log's schema types it, or None where the record lacks it. The
batch reader decodes the same fields so (`_feed`): a handler gets the same types on both paths. A
record whose field has another type is unreadable (`file:line: <event>: field 'x' is ..., expected
<type>`), as the audit has always refused one (docs/audit.md, exit status 2)."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from lifecycle.audit._reads import READ_TYPES, Typed
from lifecycle.audit._records import unreadable
from lifecycle.log import JSONValue
from lifecycle.log.schema import not_of_type


def as_read(source: str, line: int, event: str, rec: JSONValue) -> Typed:
    """The fields of parsed record `rec` (an object of a known `event`) that its handler reads, as
    their types; LogUnreadable naming the event and the field when one has another type."""
    try:
        return msgspec.convert(rec, READ_TYPES[event])
    except msgspec.ValidationError as error:
        raise unreadable(source, line, not_of_type(event, rec if isinstance(rec, Mapping) else {}, error)) from None
