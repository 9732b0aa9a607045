"""The table of credential shapes and the functions that apply it (see the package docstring)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

REDACTED = "<redacted>"
_SECRET_PARTS = frozenset(
    {
        "token",
        "secret",
        "secrets",
        "password",
        "passwd",
        "pwd",
        "apikey",
        "credential",
        "credentials",
        "auth",
        "authorization",
        "privatekey",
        "cookie",
    }
)
_SEP = r"[_\-.]?"
_SECRET_JOINED = re.compile(
    "|".join(
        f"{a}{_SEP}{b}"
        for a, b in (
            ("api", "key"),
            ("private", "key"),
            ("access", "key"),
            ("secret", "key"),
            ("auth", "token"),
            ("ssh", "key"),
            ("access", "token"),
        )
    ),
    re.I,
)
# Query parameters that carry a signature or a temporary credential whatever their name looks like.
_SIGNED = frozenset(
    {"x-amz-signature", "x-amz-credential", "x-amz-security-token", "sig", "x-goog-signature", "x-goog-credential"}
)


def is_secret_key(key: str) -> bool:
    """True for names whose values must not leave the process (hf_token, api_key, private-key...)."""
    if _SECRET_JOINED.search(key):
        return True
    return any(part in _SECRET_PARTS for part in re.split(r"[_\-.\s]", key.lower()))


@dataclass(frozen=True, slots=True)
class Shape:
    """One credential shape: `pattern`, and what a match becomes (`keep` names groups kept before
    the redaction marker; `when` a group whose text must look secret for the match to count). With
    `value`, `pattern` matches only the lead (a name and its `=`), and `value` the credential after
    it: a lead whose name is not secret then consumes nothing, so a secret inside its value (a
    `password=` inside a path) is still found."""

    name: str
    pattern: re.Pattern[str]
    keep: str = ""
    when: str = ""
    value: re.Pattern[str] | None = None

    def sub(self, text: str) -> str:
        if self.value is None:
            return self.pattern.sub(self._replace, text)
        out, pos = [], 0
        for lead in self.pattern.finditer(text):
            found = self.value.match(text, lead.end())
            if lead.start() < pos or found is None or not self._secret(lead):
                continue
            out += [text[pos : lead.end()], REDACTED]
            pos = found.end()
        return "".join(out) + text[pos:] if out else text

    def _secret(self, match: re.Match[str]) -> bool:
        name = match[self.when] if self.when else None
        return name is None or is_secret_key(name) or name.lower() in _SIGNED

    def _replace(self, match: re.Match[str]) -> str:
        if not self._secret(match):
            return match.group(0)
        return (match[self.keep] if self.keep else "") + REDACTED


_HEADER = (
    r"(?<![\w\-])(?P<header>Set-Cookie|Cookie|Proxy-Authorization|Authorization)(?P<q>[\"'])?[ \t]*:[ \t]*(?(q)[\"'])"
    r"(?!(?:Bearer|Basic|Token)\s)(?=[^\s\"'])"
)
"""An HTTP header whose whole value is a credential (a cookie's pairs, a `Digest` authorization), also as a
mapping's quoted key and value (`{'Cookie': '...'}`, JSON); a `Bearer|Basic|Token` value is left to that shape."""
_HEADER_VALUE = r"(?(q)[^\r\n\"']+|[^\r\n]+)"
"""The header's value: up to the closing quote, else to the end of the line."""


def _shape(name: str, pattern: str, keep: str = "", when: str = "", flags: int = 0, value: str = "") -> Shape:
    return Shape(name, re.compile(pattern, flags), keep, when, re.compile(value) if value else None)


SHAPES: tuple[Shape, ...] = (
    _shape(
        "pem_private_key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
        flags=re.S,
    ),
    _shape("url_userinfo", r"(?P<lead>[A-Za-z][A-Za-z0-9+.\-]*://)[^/@\s?#]+(?=@)", keep="lead"),
    _shape("scp_userinfo", r"(?P<lead>(?<![\w/:.\-])[\w.\-]+:)[^\s@/:]+(?=@[\w.\-]+:)", keep="lead"),
    _shape("query_parameter", r"(?P<lead>[?&#;](?P<name>[A-Za-z0-9_.\-]+)=)[^&#\s;\"']+", keep="lead", when="name"),
    _shape(  # a scheme's credential (`Bearer x`), or a credential header's whole value, whatever its scheme
        "authorization_header",
        rf"(?P<lead>{_HEADER}|\b(?:Bearer|Basic|Token)\s+)(?(header){_HEADER_VALUE}|[A-Za-z0-9._~+/\-]{{6,}}=*)",
        keep="lead",
        flags=re.I,
    ),
    _shape(  # `password=x`, `private-key: x`, and a command line's `--password x` / `--password=x`
        "secret_assignment",
        r"(?<![\w\-.])(?P<dash>--?)?(?P<name>[A-Za-z][A-Za-z0-9_.\-]*)"
        r"(?(dash)(?:[ \t]+(?!-)|=)|[\"']?\s*[=:]\s*[\"']?)",
        when="name",
        value=r"(?!<redacted>|(?i:bearer|basic|token)\s)[^\s\"'&,;]+",
    ),
    _shape("hugging_face_token", r"hf_[A-Za-z0-9]{16,}"),
    _shape("github_token", r"gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"),
    _shape("gitlab_token", r"glpat-[A-Za-z0-9_\-]{20,}"),
    _shape("slack_token", r"xox[abposr]-[A-Za-z0-9\-]{10,}"),
    _shape("google_api_key", r"AIza[0-9A-Za-z_\-]{35}"),
    _shape("openai_key", r"sk-[A-Za-z0-9_\-]{16,}"),
    _shape("aws_access_key_id", r"(?:AKIA|ASIA)[0-9A-Z]{16}"),
    _shape("jwt", r"eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
)
# A cheap first look: text with none of these cannot hold anything a shape matches.
_MAYBE = re.compile(
    r"@|=|hf_|gh[pousr]_|github_pat_|glpat-|xox[abposr]-|AIza|sk-|AKIA|ASIA|eyJ|PRIVATE KEY"
    r"|(?i:bearer|basic|token|passw|pwd|secret|credential|api.?key|private|auth|cookie)"
)
# The log writer's look at a record's compact JSON, which holds no space of its own: every shape
# that the token prefixes do not find needs a space, an `@` or a `=` (a `name: value`, a header, a
# PEM block), each found by a C scan; a case-insensitive alternation would cost 20x more per record.
_TOKEN_BYTES = re.compile(rb"hf_|gh[pousr]_|github_pat_|glpat-|xox[abposr]-|AIza|sk-|AKIA|ASIA|eyJ")


def may_hold_credentials(data: bytes) -> bool:
    """False when serialized `data` cannot hold anything `redact_text` would replace (C scans only;
    the log writer runs it on every record and redacts only those where it says True)."""
    return b" " in data or b"@" in data or b"=" in data or _TOKEN_BYTES.search(data) is not None


def redact_text(text: str) -> str:
    """`text` with every credential shape in `SHAPES` replaced by `REDACTED`."""
    if not _MAYBE.search(text):
        return text
    for shape in SHAPES:
        text = shape.sub(text)
    return text


_PLAIN = frozenset({int, float, bool, type(None)})


def redact(value: object) -> object:
    """A copy of nested dicts/lists with secret-looking keys' values replaced, and credentials
    inside strings (`redact_text`) removed."""
    if type(value) in _PLAIN:  # the common case in a record, checked first (isinstance on ABCs is slow)
        return value
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {str(k): (REDACTED if is_secret_key(str(k)) and v is not None else redact(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    return value
