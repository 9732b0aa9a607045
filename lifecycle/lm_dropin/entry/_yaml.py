"""A Megatron-LM YAML config (`PretrainConfigContainer.to_yaml`'s format) read as data.

Megatron-LM's own `from_yaml` instantiates every `_target_` its allowlist admits, which includes all
of `torch.*`, `transformers.*` and `signal.*`: a config could call `torch.save` while it loads. Here
the file is checked before anything of it runs, and before megatron is imported:

- it exists, is a regular file, and is at most `MAX_BYTES`;
- it has at most `MAX_REFERENCES` YAML aliases and `${...}` interpolations, and at most `MAX_NODES`
  values once every alias is expanded (an 800-byte alias bomb grows to gigabytes);
- every `_target_` names one of megatron's config classes: a dataclass or an enum defined in a
  `megatron.` module (each one's module is imported only after its name passed), the value of
  `signal.Signals`, or a torch dtype taken as a value (`_call_: false`, how `to_yaml` writes one).

`allow_targets=True` (`lifecycle run --allow-targets`) skips the last check and leaves the targets to
Megatron-LM's own allowlist.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import TYPE_CHECKING

from lifecycle.errors import ConfigError
from lifecycle.log import JSONValue

if TYPE_CHECKING:
    from megatron.training.config import PretrainConfigContainer
    from megatron.training.config.instantiate_utils import InstantiationMode

MAX_BYTES = 1 << 20
"""A Megatron-LM config as `to_yaml` writes it is about 25 KB."""
MAX_REFERENCES = 64
"""YAML aliases plus `${...}` interpolations (`to_yaml` writes none)."""
MAX_NODES = 200_000
"""Values in the config with every alias expanded (`to_yaml`'s: about 700)."""
FLAG = "--megatron-config"
DTYPES = frozenset(
    {
        *(f"float{n}" for n in (16, 32, 64)),
        *(f"int{n}" for n in (8, 16, 32, 64)),
        *(f"uint{n}" for n in (8, 16, 32, 64)),
        *("bfloat16", "bool", "half", "float", "double", "long", "int", "short", "complex64", "complex128"),
        *("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"),
    }
)
"""torch's dtype names, which a config may hold as values."""
_VALUE_TARGETS = frozenset({"signal.Signals"})
"""Targets outside megatron whose call only looks a value up (`signal.Signals(15)`)."""


def _refuse(path: str, what: str, field: str = "megatron_config") -> ConfigError:
    return ConfigError(f"{FLAG} {path}: {what}", field=field)


def read_config_data(path: str, *, allow_targets: bool = False) -> dict[str, JSONValue]:
    """The file's YAML as plain data, checked (module docstring); megatron is not imported."""
    data = _parse(path, _read(path))
    nodes, references = _count(data)
    if nodes > MAX_NODES:
        raise _refuse(path, f"expands to more than {MAX_NODES} values (YAML aliases); write the values out")
    if references > MAX_REFERENCES:
        raise _refuse(
            path,
            f"has {references} YAML aliases and ${{...}} interpolations, more than {MAX_REFERENCES}; write them out",
        )
    if not isinstance(data, dict) or "_target_" not in data:
        raise _refuse(path, "not a Megatron-LM PretrainConfigContainer YAML (no top-level _target_)")
    if not allow_targets:
        for where, target, call in _targets(data, ""):
            if not (target.startswith("megatron.") or target in _VALUE_TARGETS or _is_dtype_value(target, call)):
                raise _refuse(path, _target_problem(where, target))
    return data


def load_container(path: str, *, allow_targets: bool = False) -> PretrainConfigContainer:
    """The `PretrainConfigContainer` the file describes, built by megatron once every check passed."""
    data = read_config_data(path, allow_targets=allow_targets)
    if not allow_targets:
        for where, target, _call in _targets(data, ""):
            if target.startswith("megatron.") and not _is_config_class(target):
                raise _refuse(path, _target_problem(where, target))
    from megatron.training.config import PretrainConfigContainer
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(OmegaConf.create(data), resolve=True)
    container: PretrainConfigContainer = PretrainConfigContainer.from_dict(plain, mode=_lenient())
    return container


def _lenient() -> InstantiationMode:
    """Megatron-LM's `from_yaml` default: keys the container does not know are dropped."""
    from megatron.training.config.instantiate_utils import InstantiationMode

    return InstantiationMode.LENIENT


def _read(path: str) -> bytes:
    file = Path(path)
    try:
        info = file.stat()
    except FileNotFoundError:
        raise _refuse(path, "no such file; give the YAML Megatron-LM's to_yaml wrote") from None
    except OSError as exc:
        raise _refuse(path, f"cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise _refuse(path, "not a regular file; give the YAML Megatron-LM's to_yaml wrote")
    if info.st_size > MAX_BYTES:
        raise _refuse(path, f"{info.st_size} bytes, more than a config's {MAX_BYTES}; give the config, not data")
    try:
        with file.open("rb") as f:
            text = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise _refuse(path, f"cannot be read ({exc.strerror})") from None
    if len(text) > MAX_BYTES:
        raise _refuse(path, f"more than a config's {MAX_BYTES} bytes; give the config, not data")
    return text


def _parse(path: str, text: bytes) -> object:
    import yaml

    class Counting(yaml.SafeLoader):
        """The safe loader, stopping at the `MAX_REFERENCES + 1`-th alias."""

        aliases = 0

        def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > MAX_REFERENCES:
                    raise _refuse(path, f"has more than {MAX_REFERENCES} YAML aliases; write the values out")
            return super().compose_node(parent, index)

    loader = None
    try:
        loader = Counting(text)  # reads the bytes as text: refuses what is not UTF-8 or UTF-16
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" line {where.line + 1}" if where is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise _refuse(path, f"not YAML{line}: {problem}") from None
    finally:
        if loader is not None:
            loader.dispose()


def _count(data: object) -> tuple[int, int]:
    """(values with every alias expanded, up to just past `MAX_NODES`; distinct objects met twice
    or more plus `${` strings): the walk stops past the bound, so a bomb costs no more than that."""
    nodes, references, seen = 0, 0, set()
    todo = [data]
    while todo and nodes <= MAX_NODES:
        item = todo.pop()
        nodes += 1
        if isinstance(item, (dict, list)):
            if id(item) in seen:
                references += 1
            seen.add(id(item))
            todo.extend(item.values() if isinstance(item, dict) else item)
            if isinstance(item, dict):
                todo.extend(item.keys())
        elif isinstance(item, str) and "${" in item:
            references += 1
    return nodes, references


def _targets(data: object, where: str) -> list[tuple[str, str, bool]]:
    """Every `_target_` in `data`: (its field, the target, whether it is called)."""
    found: list[tuple[str, str, bool]] = []
    todo = [(where, data)]
    while todo:
        at, item = todo.pop()
        if isinstance(item, dict):
            if "_target_" in item:
                found.append((at or "(top)", str(item["_target_"]), item.get("_call_", True) is not False))
            todo.extend((f"{at}.{k}" if at else str(k), v) for k, v in item.items())
        elif isinstance(item, list):
            todo.extend((f"{at}[{i}]", v) for i, v in enumerate(item))
    return found


def _is_dtype_value(target: str, call: bool) -> bool:
    """`torch.<dtype>` taken as a value, as `to_yaml` writes a dtype field (told by name: torch is
    not imported for it)."""
    module, _, name = target.rpartition(".")
    return module == "torch" and not call and name in DTYPES


def _is_config_class(target: str) -> bool:
    """`target` is a dataclass or an enum defined in megatron (its module imported to see)."""
    import dataclasses
    import enum
    import importlib

    module, _, name = target.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return False
    if not isinstance(found, type) or not str(getattr(found, "__module__", "")).startswith("megatron."):
        return False
    return dataclasses.is_dataclass(found) or issubclass(found, enum.Enum)


def _target_problem(where: str, target: str) -> str:
    return (
        f"{where}: _target_ {target!r} is not one of megatron's config classes, and loading it would run it; "
        "remove it, or pass --allow-targets to let Megatron-LM's own allowlist decide"
    )
