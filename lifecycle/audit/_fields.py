"""The shape of a per-event handler (`Handler`): shared by the modules that hold handlers (`_handlers`,
`_failures`, `_ordering`, ...) and the reader (`_feed`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar, cast

from lifecycle.audit._reads import Typed

if TYPE_CHECKING:
    from lifecycle.audit._state import RankState


Handler = Callable[["RankState", Typed, float], None]
"""A per-event handler, called with its event's struct (`_reads.READ_TYPES`) and the record's time."""
_Read = TypeVar("_Read", bound=Typed)


def handler(fn: Callable[[RankState, _Read, float], None]) -> Handler:
    """`fn` as the reader calls it: with any typed record; the reader gives it its event's struct
    (`_reads.READ_TYPES`; a test holds each handler's annotation to it)."""
    return cast(Handler, fn)
