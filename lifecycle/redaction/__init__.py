"""Redaction: the one function that removes credentials from text before it leaves the process —
the startup log, `lifecycle run`'s stderr, the messages of the errors handed back to callers, and
`lifecycle audit`'s output. The shapes it knows are one table, `SHAPES`. Imports nothing of the
project, so every layer (`errors` included) can use it.
"""

from __future__ import annotations

from lifecycle.redaction._shapes import REDACTED as REDACTED
from lifecycle.redaction._shapes import is_secret_key, redact, redact_text
from lifecycle.redaction._shapes import may_hold_credentials as may_hold_credentials

__all__ = [
    "is_secret_key",
    "redact",
    "redact_text",
]
