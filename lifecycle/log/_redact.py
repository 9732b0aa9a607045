"""Redaction: what must not reach a startup log — values under secret-like keys, and credentials
inside any string (URL user-info, secret-like query parameters, common token shapes)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_SECRET_PARTS = frozenset(
    {"token", "secret", "secrets", "password", "passwd", "apikey", "credential", "credentials", "auth",
     "authorization"}
)
_SECRET_JOINED = re.compile(r"api_key|private_key|access_key|secret_key|auth_token|ssh_key", re.I)
REDACTED = "<redacted>"

# user:password@ (or a bare token@) in a URL's authority
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)[^/@\s?#]+@")
# ?token=... / &api_key=... : a query (or fragment) parameter whose name looks secret
_QUERY = re.compile(r"(?P<lead>[?&#;](?P<name>[A-Za-z0-9_.\-]+)=)(?P<value>[^&#\s;]+)")
_TOKENS = re.compile(
    r"hf_[A-Za-z0-9]{16,}"                       # Hugging Face
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|sk-[A-Za-z0-9_\-]{16,}"                   # OpenAI-style secret keys
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"                # AWS access key ids
    r"|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"  # JWTs
)
# A cheap first look: strings with none of these cannot hold anything the patterns above match.
_MAYBE = re.compile(r"@|=|hf_|gh[pousr]_|github_pat_|sk-|AKIA|ASIA|eyJ")
_MAYBE_BYTES = re.compile(_MAYBE.pattern.encode())


def may_hold_credentials(data: bytes) -> bool:
    """False when serialized `data` cannot hold anything `redact_text` would replace (one C scan;
    the writer runs it on every record and redacts only those where it says True)."""
    return _MAYBE_BYTES.search(data) is not None


def is_secret_key(key: str) -> bool:
    """True for config keys whose values must not reach a log (hf_token, api_key, db_password...)."""
    if _SECRET_JOINED.search(key):
        return True
    return any(part in _SECRET_PARTS for part in re.split(r"[_\-.]", key.lower()))


def _query(match: re.Match[str]) -> str:
    if is_secret_key(match["name"]):
        return match["lead"] + REDACTED
    return match.group(0)


def redact_text(text: str) -> str:
    """`text` with URL user-info, secret-like query parameters and token-shaped words replaced."""
    if len(text) < 8 or not _MAYBE.search(text):
        return text
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    text = _QUERY.sub(_query, text)
    return _TOKENS.sub(REDACTED, text)


_PLAIN = frozenset({int, float, bool, type(None)})


def redact(value: Any) -> Any:
    """A copy of nested dicts/lists with secret-looking keys' values replaced, and credentials
    inside strings (`redact_text`) removed."""
    if type(value) in _PLAIN:  # the common case in a record, checked first (isinstance on ABCs is slow)
        return value
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {
            str(k): (REDACTED if is_secret_key(str(k)) and v is not None else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    return value
