"""`--set KEY=VALUE` overrides: one strict parser, typed by the field the key names.

A string field (paths included) takes the text as written, never read as YAML (`runs/x #1` stays
whole, `~` is a name; only an empty value or `null` is null); numbers, booleans and `null` are read
by the field's type. A line break or NUL byte in a value, or a key given twice, is a `ConfigError`
of one line naming the field. Values of a type they do not fit are left as text, for `build` to
report with the field's expected type.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Literal

from lifecycle.errors import ConfigError
from lifecycle.log import JSONValue

_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?\.?(inf|infinity|nan)", re.I)
_BOOLS = {"true": True, "false": False, "yes": True, "no": False, "on": True, "off": False}
_NULLS = ("", "null", "~", "none")


def field_hint(cls: type | None, parts: list[str]) -> object:
    """The type of the field `parts` names in dataclass `cls`; None when there is no such field."""
    hint: object = cls
    for part in parts:
        if not (isinstance(hint, type) and dataclasses.is_dataclass(hint)):
            return None
        hints = typing.get_type_hints(hint)
        if part not in hints:
            return None
        hint = hints[part]
    return hint


def _options(hint: object) -> tuple[object, ...]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _typed(hint: object, raw: str) -> JSONValue:
    """`raw` read as the type `hint` expects, or the text itself when it does not fit."""
    options = _options(hint)
    text = raw.strip()
    if typing.get_origin(hint) is tuple:  # a list of names: `[a, b]`, `a,b` or `a`
        return tuple(part.strip().strip("'\"") for part in text.strip("[]").split(",") if part.strip())
    nulls = ("", "null") if str in options else _NULLS  # a path may be called `~` or `none`
    if type(None) in options and text.lower() in nulls:
        return None
    for option in options:
        if option is bool and text.lower() in _BOOLS:
            return _BOOLS[text.lower()]
        if option is int and _INT.fullmatch(text):
            return int(text)
        if option is float and _FLOAT.fullmatch(text):
            return float(re.sub(r"\.(?=inf|nan)", "", text.lower()))  # YAML's .inf and .nan too
    if any(typing.get_origin(o) is Literal or o is str for o in options):
        return raw if str in options else text
    return text


def _yaml(key: str, raw: str) -> JSONValue:
    """A value for a key that names no field (a section, or an unknown key `build` reports)."""
    import yaml

    try:
        return yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem", None) or type(exc).__name__
        raise ConfigError(
            f"override {key}: the value is not valid YAML ({mark}); write e.g. --set {key}=VALUE",
            field=key,
            problems=[raw],
        ) from None


def _split(item: str) -> tuple[str, str]:
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(
            f"override {item!r} is not KEY=VALUE; write e.g. --set parallel.tp=2", field=item, problems=[item]
        )
    if any(ch in raw for ch in "\n\r\0"):
        raise ConfigError(
            f"override {key}: the value holds a line break or NUL byte ({raw!r}); "
            f"give one line, e.g. --set {key}=VALUE",
            field=key,
            problems=[raw],
        )
    return key, raw


def refuse_repeated(overrides: Iterable[str]) -> None:
    """A key given twice on the command line (`--set k=1 --set k=2`) is a ConfigError naming it. In
    code, a list of overrides applies in order and the last one wins (a preset refined by a case)."""
    seen: dict[str, str] = {}
    for item in overrides:
        key, raw = _split(item)
        if key in seen:
            raise ConfigError(
                f"override {key} is given twice ({seen[key]!r}, then {raw!r}); give it once", field=key, problems=[item]
            )
        seen[key] = raw


def _section(data: dict[str, JSONValue], key: str, item: str) -> dict[str, JSONValue]:
    """The dict holding the field `key` names, sections made as needed; ConfigError for a non-section."""
    node = data
    for part in key.split(".")[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {item!r}: {part!r} is not a section", field=key, problems=[item])
        node = child
    return node


def apply_overrides(
    data: dict[str, JSONValue], overrides: Iterable[str], cls: type | None = None
) -> dict[str, JSONValue]:
    """`data` with each `KEY=VALUE` override applied in order, typed by `cls`'s field (see the module doc)."""
    for item in overrides:
        key, raw = _split(item)
        parts = key.split(".")
        hint = field_hint(cls, parts)
        leaf = hint is not None and not dataclasses.is_dataclass(hint)
        _section(data, key, item)[parts[-1]] = _typed(hint, raw) if leaf else _yaml(key, raw)
    return data


def apply_values(data: dict[str, JSONValue], values: Mapping[str, JSONValue]) -> dict[str, JSONValue]:
    """`data` with each dotted field set to its value as given: a typed value, never read as text
    (`build` checks it against the field's type like any other)."""
    for key, value in values.items():
        _section(data, key, f"{key}={value!r}")[key.split(".")[-1]] = value
    return data
