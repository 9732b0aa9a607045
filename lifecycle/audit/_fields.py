"""The shape of a per-event handler and the record fields it declares (`reads`): shared by the
modules that hold handlers (`_handlers`, `_failures`, `_ordering`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from lifecycle.audit._state import RankState


class Record(Protocol):
    """What a handler reads a record through: the reader's typed record (`_typed`). Each field the
    handler declares (`reads`) is of its type in the log's schema, or None when the record lacks it;
    the handler checks presence and meaning, not type."""

    def get(self, key: str, /) -> object: ...


Handler = Callable[["RankState", Record, float], None]
DECLARED: dict[Handler, tuple[str, ...]] = {}
"""By handler: the record fields it reads besides the envelope (`_handlers.READS` maps them by event)."""


def reads(*fields: str) -> Callable[[Handler], Handler]:
    """Declare the record fields a handler reads (see `_handlers.READS`)."""

    def mark(handler: Handler) -> Handler:
        DECLARED[handler] = fields
        return handler

    return mark
