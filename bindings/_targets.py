"""The objects the runtime reads settings from, with where each is: what `check_settings` compares.

Each chunk's config (`get_model_config(chunk)`, what megatron's schedules and layers read), each
DDP wrapper's `ddp_config`, and the optimizer's `config` (each of a chained optimizer's). Objects
several chunks share are compared once and named by all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from bindings._protocol import Module, Optimizer, SchedulerConfig
from bindings._settings import Section, Target

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    class ModelConfig(SchedulerConfig, DataclassInstance, Protocol):
        """What `get_model_config` gives: megatron's `TransformerConfig`, a dataclass holding the
        scheduler's slots."""


T = TypeVar("T")


def _chunks(indices: Sequence[int]) -> str:
    return f"chunk {indices[0]}" if len(indices) == 1 else "chunks " + ", ".join(map(str, indices))


def _grouped(objects: Sequence[T | None]) -> list[tuple[T, list[int]]]:
    """Distinct objects (by identity) in first-seen order, each with the indices that hold it."""
    seen: dict[int, tuple[T, list[int]]] = {}
    for index, obj in enumerate(objects):
        if obj is not None:
            seen.setdefault(id(obj), (obj, []))[1].append(index)
    return list(seen.values())


def settings_targets(
    chunks: Sequence[Module],
    config_of: Callable[[Module], ModelConfig],
    *,
    optimizer: Optimizer | None = None,
    provider_config: SchedulerConfig | None = None,
) -> list[Target]:
    """(section, object, where) for every object to compare; `config_of` is megatron's
    `get_model_config`."""
    out: list[Target] = []
    for config, indices in _grouped([config_of(c) for c in chunks]):
        whose = (
            ""
            if provider_config is None
            else (
                " (the provider's config)"
                if config is provider_config
                else " (not the provider's config: a copy or a new one)"
            )
        )
        out.append(("transformer", config, f"{_chunks(indices)}'s config{whose}"))
    for ddp, indices in _grouped([getattr(c, "ddp_config", None) for c in chunks]):
        out.append(("ddp", ddp, f"{_chunks(indices)}'s DDP config"))
    out += _optimizer_targets(optimizer)
    return out


def _optimizer_targets(optimizer: Optimizer | None) -> list[Target]:
    if optimizer is None:
        return []
    section: Section = "optimizer"
    inner = getattr(optimizer, "chained_optimizers", None) or [optimizer]
    grouped = _grouped([getattr(o, "config", None) for o in inner])
    if len(grouped) == 1:
        return [(section, grouped[0][0], "the optimizer's config")]
    return [(section, config, f"chained optimizer {', '.join(map(str, ix))}'s config") for config, ix in grouped]
