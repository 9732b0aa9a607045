"""Change detection, one mechanism for both configs a run validates: the `RunConfig` and the
megatron `TransformerConfig` built from it.

`snapshot_config(obj)` records every field's value now (a RunConfig as dotted fields, any other
dataclass, such as megatron's TransformerConfig, by its fields); `config_drift(snapshot, obj)`
lists `(field, old, new)` for each field that differs later. Lists, dicts and sets are copied at
snapshot time, so in-place edits are caught; other values are compared with `==`, falling back to
identity for objects whose `==` fails or is not a plain bool (tensors, process groups).
`Snapshot` adds a fast "anything changed?" test for a RunConfig, so the engine can check before
every transition, and reports the changes through `config_drift`.
"""

from __future__ import annotations

import copy
import dataclasses
import operator
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from bindings import SLOTS
from lifecycle.config._records import RunConfig
from lifecycle.errors import ConfigMutated
from lifecycle.log import JSONValue

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

# Written by bindings when callbacks are bound: drift there is expected, not a mutation.
CALLBACK_FIELDS: frozenset[str] = frozenset(SLOTS)
T = TypeVar("T")


class Change(NamedTuple):
    """One field that differs: its name (dotted for a RunConfig), its value then and its value now
    (any field's value: megatron's configs hold tensors, process groups, functions)."""

    field: str
    old: object
    new: object


Drift = list[Change]


def flatten(data: Mapping[str, JSONValue], prefix: str = "") -> dict[str, JSONValue]:
    """`{"a": {"b": 1}}` → `{"a.b": 1}`."""
    out: dict[str, JSONValue] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def diff(old: Mapping[str, JSONValue], new: Mapping[str, JSONValue]) -> Drift:
    """(dotted field, old, new) for every field that differs between two nested dicts."""
    return config_drift(flatten(old), flatten(new))


def snapshot_config(obj: object) -> Mapping[str, object]:
    """Every field of `obj` (RunConfig or any dataclass instance) and its value now."""
    if isinstance(obj, RunConfig):
        return flatten(obj.to_dict())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _copy(getattr(obj, f.name, None)) for f in dataclasses.fields(obj)}
    raise TypeError(f"cannot snapshot a {type(obj).__name__}: pass a RunConfig or a dataclass")


def config_drift(snapshot: Mapping[str, object], current: object, ignore: Iterable[str] = ()) -> Drift:
    """`(field, old, new)` for every field whose value differs from `snapshot`, sorted by field."""
    now = current if isinstance(current, Mapping) else snapshot_config(current)
    skip = frozenset(ignore)
    missing = object()
    out: Drift = []
    for name in sorted((set(snapshot) | set(now)) - skip):
        old, new = snapshot.get(name, missing), now.get(name, missing)
        if not _same(old, new):
            out.append(Change(name, None if old is missing else old, None if new is missing else new))
    return out


def require_unchanged(
    snapshot: Mapping[str, object], current: object, *, what: str, ignore: Iterable[str] = ()
) -> None:
    """Raise ConfigMutated naming the first changed field (and listing all) if anything drifted."""
    drift = config_drift(snapshot, current, ignore)
    if not drift:
        return
    name, old, new = drift[0]
    names = ", ".join(d[0] for d in drift)
    raise ConfigMutated(
        f"{what} changed after VALIDATED: {name} was {old!r}, is now {new!r} (changed: {names}); "
        "derive a new config with replace() and start a new lifecycle instead of mutating it",
        field=name,
        validated=repr(old),
        current=repr(new),
        fields=[d[0] for d in drift],
    )


class Snapshot:
    """The field values of a RunConfig at one moment; `changes()` names what differs now (fast: one
    attrgetter per section and one for the top level)."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.sections = tuple(
            (getattr(config, f.name), _getter(getattr(config, f.name)))
            for f in dataclasses.fields(config)
            if dataclasses.is_dataclass(getattr(config, f.name))
        )
        self.values = tuple(get(section) for section, get in self.sections)
        self.top_getter = _getter(config)
        self.top = self.top_getter(config)
        self.flat = snapshot_config(config)

    def changes(self) -> Drift:
        same = self.top_getter(self.config) == self.top and all(
            get(section) == values for (section, get), values in zip(self.sections, self.values, strict=True)
        )
        return [] if same else config_drift(self.flat, self.config)


def _getter(obj: DataclassInstance) -> Callable[[DataclassInstance], object]:
    names = [f.name for f in dataclasses.fields(obj)]
    get = operator.attrgetter(*names)
    return (lambda o: (get(o),)) if len(names) == 1 else get


def _copy(value: T) -> T:
    if isinstance(value, (list, dict, set)):
        return copy.copy(value)
    return value


def _same(a: object, b: object) -> bool:
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    try:
        equal = a == b
    except Exception:  # objects whose == raises (e.g. some tensors) compare by identity
        return False
    return equal if isinstance(equal, bool) else False
