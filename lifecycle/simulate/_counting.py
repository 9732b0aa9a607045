"""What a simulated rank creates and issues in each state it enters: process groups, collectives
and store operations, counted by wrapping `torch.distributed`'s functions while the rank advances
one state at a time, so the rehearsal predicts where a large job's startup spends its rendezvous.

Store operations are counted on the store given to `init_process_group`, wrapped: every group's
`PrefixStore` sits on it, so what torch, megatron or a backend asks of any store of the job passes
there. On the fake backend they are 0 (docs/observability.md): its process groups never touch the
store, and neither torch's `new_group` nor megatron-core's group creation does.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, ParamSpec, TypeVar

if TYPE_CHECKING:
    from datetime import timedelta

    from torch.distributed import Store

P = ParamSpec("P")
R = TypeVar("R")

PROCESS_GROUPS = ("init_process_group", "new_group")
"""`new_subgroups*` build theirs with `new_group`: counted there, once."""
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "batch_isend_irecv",
    "broadcast",
    "broadcast_object_list",
    "gather",
    "gather_object",
    "irecv",
    "isend",
    "monitored_barrier",
    "recv",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
    "scatter_object_list",
    "send",
)
STORE_OPS = (
    "set",
    "get",
    "add",
    "compare_set",
    "wait",
    "check",
    "delete_key",
    "num_keys",
    "append",
    "multi_get",
    "multi_set",
)
"""The operations of `torch.distributed.Store` that reach its server (`set_timeout` does not)."""
NAMES = ("process_groups", "collectives", "store_ops")
_KEPT: list[Store] = []
"""The counting stores made, alive while their process groups may use them (one per simulated rank)."""


class Counts:
    """Per state name: {process_groups, collectives}. `state` is the state being entered."""

    def __init__(self) -> None:
        self.state: str | None = None
        self.table: dict[str, dict[str, int]] = {}

    def add(self, name: str) -> None:
        if self.state is not None:
            row = self.table.setdefault(self.state, dict.fromkeys(NAMES, 0))
            row[name] += 1


@contextlib.contextmanager
def counting() -> Iterator[Counts]:
    """Count calls to torch.distributed's group and collective functions (called through the module,
    as megatron calls them) until the block ends; the functions are put back then."""
    import torch.distributed as dist

    counts = Counts()
    saved: dict[str, Callable[..., object]] = {}
    for kind, names in (("process_groups", PROCESS_GROUPS), ("collectives", COLLECTIVES)):
        for name in names:
            original = getattr(dist, name, None)
            if original is not None:
                saved[name] = original
                wrapped = _store_counted(original, counts) if name == "init_process_group" else original
                setattr(dist, name, _counted(wrapped, counts, kind))
    try:
        yield counts
    finally:
        counts.state = None  # what the rank's groups do after the block is not counted
        for name, original in saved.items():
            setattr(dist, name, original)


def _counted(original: Callable[P, R], counts: Counts, kind: str) -> Callable[P, R]:
    @functools.wraps(original)
    def counted(*args: P.args, **kwargs: P.kwargs) -> R:
        counts.add(kind)
        return original(*args, **kwargs)

    return counted


def _store_counted(init: Callable[P, R], counts: Counts) -> Callable[P, R]:
    """`init_process_group` with its `store=` wrapped by `counting_store`."""

    @functools.wraps(init)
    def with_counted_store(*args: P.args, **kwargs: P.kwargs) -> R:
        store = kwargs.get("store")
        if store is not None:
            kwargs["store"] = counting_store(store, counts)
        return init(*args, **kwargs)

    return with_counted_store


def counting_store(inner: Store, counts: Counts) -> Store:
    """A `torch.distributed.Store` that counts each operation (`STORE_OPS`) and makes it on `inner`."""
    import torch.distributed as dist

    def operation(name: str) -> Callable[..., object]:
        def counted(self: Store, *args: object) -> object:
            counts.add("store_ops")
            method: Callable[..., object] = getattr(inner, name)
            return method(*args)

        counted.__name__ = name
        return counted

    def set_timeout(self: Store, timeout: timedelta) -> None:  # the trampoline has no default for it
        inner.set_timeout(timeout)

    cls = type(
        "CountingStore", (dist.Store,), {name: operation(name) for name in STORE_OPS} | {"set_timeout": set_timeout}
    )
    store: Store = cls()
    _KEPT.append(store)  # torch holds only its C++ half: without this its Python methods would be gone
    return store
