"""Detect changes to a validated config, or to the megatron TransformerConfig built from it.

`snapshot_config(obj)` records every field's value now (a RunConfig as dotted fields, any other
dataclass such as megatron's TransformerConfig by its fields); `config_drift(snapshot, obj)` lists
`(field, old, new)` for each field that differs later. Lists, dicts and sets are copied at
snapshot time, so in-place edits are caught; other values are compared with `==`, falling back to
identity for objects whose `==` fails or is not a plain bool (tensors, process groups).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from lifecycle._errors import ConfigMutated
from lifecycle.config import RunConfig, flatten

# Written by bindings when callbacks are bound: drift there is expected, not a mutation.
CALLBACK_FIELDS: frozenset[str] = frozenset(
    {
        "finalize_model_grads_func",
        "grad_scale_func",
        "no_sync_func",
        "grad_sync_func",
        "param_sync_func",
    }
)

Drift = list[tuple[str, Any, Any]]


def snapshot_config(obj: Any) -> dict[str, Any]:
    """Every field of `obj` (RunConfig or any dataclass instance) and its value now."""
    if isinstance(obj, RunConfig):
        return flatten(obj.to_dict())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _copy(getattr(obj, f.name, None)) for f in dataclasses.fields(obj)}
    raise TypeError(f"cannot snapshot a {type(obj).__name__}: pass a RunConfig or a dataclass")


def config_drift(
    snapshot: Mapping[str, Any], current: Any, ignore: Iterable[str] = ()
) -> Drift:
    """`(field, old, new)` for every field whose value differs from `snapshot`, sorted by field."""
    now = current if isinstance(current, Mapping) else snapshot_config(current)
    skip = frozenset(ignore)
    missing = object()
    out: Drift = []
    for name in sorted((set(snapshot) | set(now)) - skip):
        old, new = snapshot.get(name, missing), now.get(name, missing)
        if not _same(old, new):
            out.append((name, None if old is missing else old, None if new is missing else new))
    return out


def require_unchanged(
    snapshot: Mapping[str, Any], current: Any, *, what: str, ignore: Iterable[str] = ()
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


def _copy(value: Any) -> Any:
    if isinstance(value, (list, dict, set)):
        return copy.copy(value)
    return value


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    try:
        equal = a == b
    except Exception:  # objects whose == raises (e.g. some tensors) compare by identity
        return False
    return equal if isinstance(equal, bool) else False
