"""Loading config records: nested dicts, YAML files, shipped presets and `--set` overrides.

Generic over frozen dataclasses, so it knows nothing of `RunConfig` itself: unknown keys and wrong
types are collected into one `ConfigError` that names every field and the nearest valid key.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

from lifecycle.errors import ConfigError
from lifecycle.log import JSONValue

if TYPE_CHECKING:
    import yaml
    from _typeshed import DataclassInstance

_R = TypeVar("_R", bound="DataclassInstance")
_K = TypeVar("_K")

PRESETS = Path(__file__).resolve().parents[1] / "presets"
# YAML 1.1 (PyYAML) reads `1e-3` as a string; a float field takes such strings as numbers.
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def preset_names() -> list[str]:
    """Names of the presets shipped in `lifecycle/presets/`."""
    return sorted(p.stem for p in PRESETS.glob("*.yaml"))


def preset_path(name: str) -> Path:
    """The YAML file of preset `name`; ConfigError with the nearest name when there is none."""
    path = PRESETS / f"{name}.yaml"
    if not path.is_file():
        known = preset_names()
        hint = difflib.get_close_matches(name, known, n=1)
        near = f"; did you mean {hint[0]!r}?" if hint else ""
        raise ConfigError(
            f"unknown preset {name!r}{near} Known presets: {', '.join(known)}",
            field="preset",
            problems=[name],
        )
    return path


def read_yaml(path: Path) -> dict[str, JSONValue]:
    """The top-level mapping of a YAML config file."""
    import yaml

    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(
            f"cannot read config file {str(path)!r}: {exc.strerror}; pass an existing YAML file",
            field="path",
            problems=[str(exc)],
        ) from exc
    try:
        data = yaml.load(text, Loader=_unique_keys_loader()) or {}  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        what = getattr(exc, "problem", None) or type(exc).__name__
        raise ConfigError(
            f"{path}: not valid YAML{where}: {what}; fix the file", field="path", problems=[str(exc)]
        ) from exc
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: the top level must be a mapping of sections", field="path", problems=[])
    return plain(data)


def _unique_keys_loader() -> type[yaml.SafeLoader]:
    """PyYAML's SafeLoader, refusing a key given twice in one mapping (PyYAML keeps the last)."""
    import yaml

    class UniqueKeys(yaml.SafeLoader):
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, object]:
            keys = [self.construct_object(k, deep=True) for k, _ in node.value]
            twice = sorted({str(k) for k in keys if keys.count(k) > 1})
            if twice:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {twice[0]!r} is given twice in one mapping; give it once", node.start_mark
                )
            return super().construct_mapping(node, deep=deep)

    return UniqueKeys


def to_dict(obj: DataclassInstance | type[DataclassInstance]) -> dict[str, JSONValue]:
    out: dict[str, JSONValue] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        out[f.name] = to_dict(value) if dataclasses.is_dataclass(value) else value
    return out


def plain(data: Mapping[_K, JSONValue]) -> dict[str, JSONValue]:
    return {str(k): (plain(v) if isinstance(v, Mapping) else v) for k, v in data.items()}


def build(cls: type[_R], data: Mapping[str, JSONValue], where: str = "") -> _R:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    problems: list[str] = []
    kwargs: dict[str, JSONValue | DataclassInstance] = {}  # the fields: values and built sections
    for key, value in data.items():
        path = f"{where}{key}"
        if key not in names:
            near = difflib.get_close_matches(key, names, n=1, cutoff=0.5)
            hint = f"did you mean {(where + near[0])!r}?" if near else f"valid keys: {', '.join(names)}"
            problems.append(f"unknown key {path!r}: {hint}")
            continue
        hint = hints[key]
        if dataclasses.is_dataclass(hint) and isinstance(hint, type):
            if not isinstance(value, Mapping):
                problems.append(f"{path} must be a mapping of {hint.__name__} fields, got {value!r}")
                continue
            try:
                kwargs[key] = build(hint, value, path + ".")
            except ConfigError as exc:
                problems.extend(str(p) for p in exc.problems)
            continue
        value = _as_number(hint, value)
        if typing.get_origin(hint) is tuple and isinstance(value, list):
            value = tuple(value)
        error = _type_problem(hint, value)
        if error:
            problems.append(f"{path}: {error}")
        else:
            is_int = isinstance(value, int) and not isinstance(value, bool)
            kwargs[key] = float(value) if is_int and _is_float(hint) and isinstance(value, int) else value
    if problems:
        raise ConfigError(
            "invalid config:\n  - " + "\n  - ".join(problems), field=where.rstrip(".") or None, problems=problems
        )
    return cls(**kwargs)


def _as_number(hint: object, value: JSONValue) -> JSONValue:
    """A numeric string (`1e-3`, which YAML 1.1 leaves a string) as a float where the field is one."""
    if isinstance(value, str) and _is_float(hint) and _NUMBER.fullmatch(value.strip()):
        return float(value)
    return value


def _is_float(hint: object) -> bool:
    return hint is float or float in typing.get_args(hint)


def _type_problem(hint: object, value: JSONValue) -> str | None:
    origin = typing.get_origin(hint)
    if origin is Literal:
        choices = typing.get_args(hint)
        return None if value in choices else f"got {value!r}; choose one of {', '.join(map(repr, choices))}"
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        errors = [_type_problem(o, value) for o in options if o is not type(None)]
        return None if any(e is None for e in errors) else errors[0]
    if origin is tuple:
        ok = isinstance(value, tuple) and all(isinstance(v, str) for v in value)
        return None if ok else f"expected a list of names such as [a, b], got {value!r}"
    if hint is bool:
        return None if isinstance(value, bool) else f"expected true or false, got {value!r}"
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return None if ok else f"expected an integer, got {value!r}"
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return None if ok else f"expected a number such as 0.001 or 1e-3, got {value!r}"
    if hint is str:
        return None if isinstance(value, str) else f"expected a string, got {value!r}"
    if hint is type(None):
        return None if value is None else f"expected null, got {value!r}"
    return None
