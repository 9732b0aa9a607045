"""What a log record's field may hold: a JSON value, as orjson writes it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

JSONValue: TypeAlias = str | int | float | bool | Sequence["JSONValue"] | Mapping[str, "JSONValue"] | None
"""A value of a record's field: a JSON scalar, or a sequence or a string-keyed mapping of them."""

Fields: TypeAlias = dict[str, JSONValue]
"""A record's fields by name, before the envelope (`ts`, `seq`, ...) is added."""
