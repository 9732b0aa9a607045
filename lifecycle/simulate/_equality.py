"""Both creations of megatron's groups side by side: every `parallel_state` global after
`distributed.groups: own` equals the one after `megatron`, rank by rank.

`parallel_state_snapshot` describes every global of megatron's `parallel_state` (the module's
`_UPPER_CASE` names and `_global_process_group_list`): a process group by its ranks, backend,
timeout and `group_desc` (not its name: torch names megatron's groups by a counter, own groups by
their ranks); a list, tuple or dict of them item by item; anything else by its value (rank lists,
sizes) or, for an object (the memory buffer), its type. `compare_creations` initializes the parallel
state of chosen ranks of a job on torch's fake backend under each creation and lists every global
that differs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lifecycle.config import RunConfig
from lifecycle.log import JSONValue


def describe(value: object) -> JSONValue:
    """A parallel_state global as plain data (see the module)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    from lifecycle.core_entry.timeouts import seconds

    if isinstance(value, dist.ProcessGroup):
        if value not in c10d._world.pg_group_ranks:
            return "<a destroyed group>"  # destroy_model_parallel leaves _HIERARCHICAL_CONTEXT_PARALLEL_GROUPS set
        return {
            "ranks": list(dist.get_process_group_ranks(value)),
            "backend": str(dist.get_backend(value)),
            "timeout_s": seconds(value),
            "desc": str(getattr(value, "group_desc", "")),
        }
    if isinstance(value, list | tuple):
        return [describe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): describe(v) for k, v in sorted(value.items())}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return f"<{type(value).__name__}>"


def parallel_state_snapshot() -> dict[str, JSONValue]:
    """Every global of megatron's `parallel_state`, described."""
    from megatron.core import parallel_state

    return {
        name: describe(value)
        for name, value in sorted(vars(parallel_state).items())
        if name == "_global_process_group_list" or (name.startswith("_") and name.isupper())
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class Difference:
    """A global whose value under `own` is not the one under `megatron`, on `rank`."""

    rank: int
    name: str
    megatron: JSONValue
    own: JSONValue


def differences(rank: int, megatron: Mapping[str, JSONValue], own: Mapping[str, JSONValue]) -> list[Difference]:
    """The globals of two snapshots that differ (a name missing on one side counts)."""
    return [
        Difference(rank=rank, name=name, megatron=megatron.get(name), own=own.get(name))
        for name in sorted(set(megatron) | set(own))
        if megatron.get(name, "<absent>") != own.get(name, "<absent>")
    ]


def snapshot_after(creation: str, rank: int, world_size: int, kwargs: Mapping[str, Any]) -> dict[str, JSONValue]:
    """The globals after `creation` initialized `rank` of `world_size` on the fake backend; then both
    the parallel state and the process group are destroyed."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    from lifecycle.core_entry.distributed import init_fake_process_group
    from lifecycle.core_entry.groups import initialize_model_parallel

    init_fake_process_group(rank, world_size)
    try:
        initialize_model_parallel(creation, **kwargs)  # type: ignore[arg-type]  # "own" or "megatron"
        return parallel_state_snapshot()
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def compare_creations(
    config: RunConfig, *, world_size: int, ranks: Iterable[int], extra: Mapping[str, Any] | None = None
) -> list[Difference]:
    """Every global that differs between the two creations on each of `ranks` of `config` at
    `world_size` (fake backend, as DISTRIBUTED gives megatron its arguments, plus `extra`)."""
    from lifecycle.core_entry.distributed import megatron_kwargs

    kwargs = {**megatron_kwargs(config), "create_gloo_process_groups": False, **(extra or {})}
    out: list[Difference] = []
    for rank in ranks:
        megatron = snapshot_after("megatron", rank, world_size, kwargs)
        own = snapshot_after("own", rank, world_size, kwargs)
        out += differences(rank, megatron, own)
    return out
