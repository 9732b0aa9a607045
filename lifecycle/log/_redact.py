"""Redaction: config keys whose values must not reach a startup log."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_SECRET_PARTS = frozenset(
    {"token", "secret", "secrets", "password", "passwd", "apikey", "credential", "credentials", "auth"}
)
_SECRET_JOINED = re.compile(r"api_key|private_key|access_key|secret_key|auth_token", re.I)
REDACTED = "<redacted>"


def is_secret_key(key: str) -> bool:
    """True for config keys whose values must not reach a log (hf_token, api_key, db_password...)."""
    if _SECRET_JOINED.search(key):
        return True
    return any(part in _SECRET_PARTS for part in re.split(r"[_\-.]", key.lower()))


def redact(value: Any) -> Any:
    """A copy of nested dicts/lists with secret-looking keys' values replaced."""
    if isinstance(value, Mapping):
        return {
            str(k): (REDACTED if is_secret_key(str(k)) and v is not None else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    return value
