"""What a simulated rank creates and issues in each state it enters: process groups and
collectives, counted by wrapping `torch.distributed`'s functions while the rank advances one state
at a time, so the rehearsal predicts where a large job's startup spends its rendezvous.

Store operations are not counted: on the fake backend torch makes none (its `FakeStore` has no
operations), so a count here would say nothing about the real job.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

PROCESS_GROUPS = ("init_process_group", "new_group")
"""`new_subgroups*` build theirs with `new_group`: counted there, once."""
COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all", "all_to_all_single",
    "barrier", "batch_isend_irecv", "broadcast", "broadcast_object_list", "gather", "gather_object", "irecv",
    "isend", "monitored_barrier", "recv", "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter",
    "scatter_object_list", "send",
)
NAMES = ("process_groups", "collectives")


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
    saved: dict[str, Callable[..., Any]] = {}
    for kind, names in (("process_groups", PROCESS_GROUPS), ("collectives", COLLECTIVES)):
        for name in names:
            original = getattr(dist, name, None)
            if original is not None:
                saved[name] = original
                setattr(dist, name, _counted(original, counts, kind))
    try:
        yield counts
    finally:
        for name, original in saved.items():
            setattr(dist, name, original)


def _counted(original: Callable[..., Any], counts: Counts, kind: str) -> Callable[..., Any]:
    @functools.wraps(original)
    def counted(*args: Any, **kwargs: Any) -> Any:
        counts.add(kind)
        return original(*args, **kwargs)
    return counted
