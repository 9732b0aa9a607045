"""Every process group's timeout, read back from the group (docs/failures.md#every-groups-timeout).

A group's timeout is its own, not the one passed to `init_process_group`: torch's `new_group`
without `timeout=` takes the backend's default (gloo 30 min, NCCL 10 min), whatever the world's is
(Megatron-Bridge #4011), and megatron-core 0.15.3 to 0.19.2 create `EXPERT_DATA_PARALLEL_GROUP_GLOO`
with none (`parallel_state.py`: the class of Megatron-LM #2238). So at DISTRIBUTED's exit the
lifecycle reads each group's timeout back from its backend, sets `startup.timeout_s` on a group
megatron made there with another one (megatron was asked for it: `distributed_timeout_minutes`),
and logs the map as one `timeouts_read` record. From DISTRIBUTED on, `GroupWatch` wraps
`torch.distributed.new_group`: it names who created each group, and logs each group created after
DISTRIBUTED as `group_created`, before its first collective. Audit rules LA028 (a timeout that is
not the configured one) and LA029 (a group created after CALLBACKS_BOUND) read both.

Each group's creation is timed (`connect_s`): gloo connects every pair of a group when it is made, so
the expensive groups show in the record; NCCL connects at the first collective unless the world was
made with a `device_id` (eager init; not exercised here: no GPU). Cost: one backend read per group this
rank is in (about 20 with megatron's groups), nothing at the store; about 200 bytes a group.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, ParamSpec, TypedDict, TypeVar

from lifecycle.log import JSONValue, records

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

Emit = Callable[[records.Record], None]
P = ParamSpec("P")
R = TypeVar("R")

_SKIPPED = ("torch.", "lifecycle.core_entry.timeouts")
_HELPERS = ("create_group",)  # megatron's wrapper of new_group: its caller made the group


def creator(depth: int = 2) -> str:
    """module:function:line of the first caller outside torch and megatron's `create_group`."""
    frame = sys._getframe(depth)
    while frame is not None:
        module = str(frame.f_globals.get("__name__", "?"))
        if not module.startswith(_SKIPPED) and frame.f_code.co_name not in _HELPERS:
            return f"{module}:{frame.f_code.co_name}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return "?"


def seconds(group: ProcessGroup) -> float | None:
    """The group's timeout in seconds, read from its backends' options (the longest when they differ);
    None when no backend has one to read."""
    import torch

    found = []
    for device in getattr(group, "_device_types", []):
        try:
            options = group._get_backend(torch.device(device)).options
            found.append(float(options._timeout.total_seconds()))
        except (AttributeError, RuntimeError):
            continue
    return max(found) if found else None


class GroupFacts(TypedDict):
    """A group's name, backend(s) and size, as `group_created` and `timeouts_read` name them."""

    name: str
    backend: str | None
    size: int


def describe(group: ProcessGroup, globals_: dict[int, str]) -> GroupFacts:
    """The group's name (megatron's `group_desc`, else its parallel_state global, else torch's name),
    backend(s) and size."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    desc = str(getattr(group, "group_desc", "") or "")
    name = desc if desc and desc != "undefined" else globals_.get(id(group), f"group {group.group_name}")
    backend = c10d._world.pg_backend_config.get(group)
    return {"name": name, "backend": backend, "size": dist.get_world_size(group)}


def megatron_globals() -> dict[int, str]:
    """id(group) → the parallel_state global that holds it (`_TENSOR_MODEL_PARALLEL_GROUP`, ...)."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    return {id(v): k.strip("_") for k, v in vars(parallel_state).items() if isinstance(v, dist.ProcessGroup)}


class GroupWatch:
    """`torch.distributed.new_group` wrapped from `install` to `close`: who created each group; once
    `log_from_now` is called, a `group_created` record for each new group (before its first collective)."""

    def __init__(self) -> None:
        self.creators: dict[str, str] = {}  # torch's group name → creator
        self.seconds: dict[str, float] = {}  # torch's group name → how long its creation took (gloo connects then)
        self._emit: Emit | None = None
        self._original: Callable[..., object] | None = None
        self._wrapper: Callable[..., object] | None = None

    def installed(self) -> GroupWatch:
        """Wrap `new_group` now; returns itself."""
        import torch.distributed as dist

        original = dist.new_group
        new_group = _timed(original, self._created)
        self._original, self._wrapper = original, new_group
        dist.new_group = new_group
        return self

    def _created(self, group: object, made_by: str, took_s: float) -> None:
        """Name its creator; after DISTRIBUTED, log it (a rank not in it logs that it made it too)."""
        import torch.distributed as dist

        if not isinstance(group, dist.ProcessGroup):
            if self._emit is not None:
                absent = GroupFacts(name="(this rank is not in it)", backend=None, size=0)
                self._emit(
                    records.GroupCreated(**absent, timeout_s=None, created_by=made_by, member=False, connect_s=took_s)
                )
            return
        self.creators[group.group_name], self.seconds[group.group_name] = made_by, round(took_s, 6)
        if self._emit is not None:
            facts = describe(group, {})
            self._emit(
                records.GroupCreated(**facts, timeout_s=seconds(group), connect_s=round(took_s, 6), created_by=made_by)
            )

    def log_from_now(self, emit: Emit) -> None:
        self._emit = emit

    def close(self) -> None:
        """Put torch's `new_group` back (unless someone wrapped it after us: then ours stays, inert)."""
        import torch.distributed as dist

        if self._original is not None and dist.new_group is self._wrapper:
            dist.new_group = self._original
        self._emit, self._original, self._wrapper = None, None, None


def _timed(original: Callable[P, R], created: Callable[[R, str, float], None]) -> Callable[P, R]:
    """`new_group` that tells `created` each group it made, its creator and how long it took."""

    def new_group(*args: P.args, **kwargs: P.kwargs) -> R:
        start = time.perf_counter()
        group = original(*args, **kwargs)
        created(group, creator(2), time.perf_counter() - start)
        return group

    return new_group


def read_back(configured_s: float, watch: GroupWatch) -> tuple[list[dict[str, JSONValue]], int]:
    """Every group this rank is in but the world: name, backend, size, timeout read back, creator; a
    group megatron made here with a timeout other than `configured_s` gets it (`corrected_from`).
    Returns the entries and how many were corrected."""
    from torch.distributed import distributed_c10d as c10d

    names, entries, corrected = megatron_globals(), [], 0
    for group in list(c10d._world.pg_map):
        if group is c10d._world.default_pg:
            continue
        facts = describe(group, names)
        entry: dict[str, JSONValue] = {"name": facts["name"], "backend": facts["backend"], "size": facts["size"]}
        entry["timeout_s"] = seconds(group)
        entry["created_by"] = watch.creators.get(group.group_name, "?")
        entry["connect_s"] = watch.seconds.get(group.group_name)
        found = entry["timeout_s"]
        if found is not None and found != configured_s and str(entry["created_by"]).startswith("megatron."):
            group.set_timeout(timedelta(seconds=configured_s))
            entry |= {"timeout_s": seconds(group), "corrected_from": found}
            corrected += 1
        entries.append(entry)
    return entries, corrected


def log_timeouts(emit: Emit, configured_s: float, watch: GroupWatch, *, watch_s: float | None) -> None:
    """The `timeouts_read` record: the world's, the store's, the watch's and every group's timeout;
    from now on `watch` logs each new group."""
    from torch.distributed import distributed_c10d as c10d

    groups, corrected = read_back(configured_s, watch)
    world = c10d._world.default_pg
    try:
        store_s: float | None = float(c10d._get_default_store().timeout.total_seconds())
    except (AttributeError, RuntimeError, ValueError):
        store_s = None
    emit(
        records.TimeoutsRead(
            configured_s=configured_s,
            world_s=seconds(world) if world is not None else None,
            store_s=store_s,
            watch_s=watch_s,
            groups=[dict(group) for group in groups],
            corrected=corrected,
        )
    )
    watch.log_from_now(emit)
