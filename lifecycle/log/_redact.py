"""Redaction for the startup log: the one table and functions of `lifecycle.redaction`, re-exported
where the log's users have always found them."""

from __future__ import annotations

from lifecycle.redaction import REDACTED, is_secret_key, may_hold_credentials, redact, redact_text

__all__ = ["REDACTED", "is_secret_key", "may_hold_credentials", "redact", "redact_text"]
