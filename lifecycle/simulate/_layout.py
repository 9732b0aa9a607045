"""Where each rank of a job sits: expected from megatron's `RankGenerator` (no process group), or
observed in megatron's parallel state after DISTRIBUTED; and which ranks a simulation should pick.

Imports megatron only inside functions, so `import lifecycle.simulate` stays light.
"""

from __future__ import annotations

import dataclasses
import inspect
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lifecycle.config import ParallelConfig
from lifecycle.log import JSONValue

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

COORDINATES = ("tp", "pp", "cp", "ep", "dp", "etp", "edp")
GROUPS = ("tp", "pp", "cp", "dp", "ep", "embedding")


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """One rank's coordinates in each parallel dimension, its pipeline position, and the global ranks
    of its groups (`embedding_group` is empty when the rank holds no word embedding)."""

    rank: int
    tp: int
    pp: int
    cp: int
    ep: int
    dp: int
    etp: int
    edp: int
    first_stage: bool
    last_stage: bool
    tp_group: tuple[int, ...]
    pp_group: tuple[int, ...]
    cp_group: tuple[int, ...]
    dp_group: tuple[int, ...]
    ep_group: tuple[int, ...]
    embedding_group: tuple[int, ...]

    def to_dict(self) -> dict[str, JSONValue]:
        return {
            f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in dataclasses.fields(self)
        }

    def summary(self) -> dict[str, JSONValue]:
        """Coordinates, stage and embedding group, without the (long) group member lists."""
        out = {name: getattr(self, name) for name in ("rank", *COORDINATES, "first_stage", "last_stage")}
        out["embedding_group"] = list(self.embedding_group)
        return out

    def differences(self, expected: Placement) -> tuple[str, ...]:
        """`field: megatron X, RankGenerator Y` for every field that differs."""
        return tuple(
            f"{f.name}: megatron {getattr(self, f.name)!r}, RankGenerator {getattr(expected, f.name)!r}"
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(expected, f.name)
        )


class _Index:
    """Groups of one kind, and for each rank: which group holds it and its position there."""

    __slots__ = ("group_of", "groups", "position")

    def __init__(self, groups: list[list[int]], world: int) -> None:
        self.groups = [tuple(g) for g in groups]
        self.group_of = [0] * world
        self.position = [0] * world
        for number, group in enumerate(self.groups):
            for position, rank in enumerate(group):
                self.group_of[rank] = number
                self.position[rank] = position

    def members(self, rank: int) -> tuple[int, ...]:
        return self.groups[self.group_of[rank]]


class Layout:
    """Every rank's expected placement in a `world`-rank job with the sizes of `parallel`, computed
    as megatron's `initialize_model_parallel` computes its groups (its default `order`, its
    `default_embedding_ranks`), from `RankGenerator` alone: no process group is created."""

    def __init__(self, parallel: ParallelConfig, world: int) -> None:
        from megatron.core import parallel_state as ps

        p = parallel
        self.world = world
        self.pp_size = p.pp
        self.order: str = inspect.signature(ps.initialize_model_parallel).parameters["order"].default
        etp = p.etp or p.tp
        dense = ps.RankGenerator(tp=p.tp, ep=1, dp=world // (p.tp * p.pp * p.cp), pp=p.pp, cp=p.cp, order=self.order)
        expert = ps.RankGenerator(tp=etp, ep=p.ep, dp=world // (etp * p.ep * p.pp), pp=p.pp, cp=1, order=self.order)
        sources = {
            "tp": (dense, "tp"),
            "pp": (dense, "pp"),
            "cp": (dense, "cp"),
            "dp": (dense, "dp"),
            "ep": (expert, "ep"),
            "etp": (expert, "tp"),
            "edp": (expert, "dp"),
        }
        self._index = {name: _Index(gen.get_ranks(token), world) for name, (gen, token) in sources.items()}
        self._embedding_ranks = ps.default_embedding_ranks

    def placement(self, rank: int) -> Placement:
        at = {name: index.position[rank] for name, index in self._index.items()}
        group = {name: self._index[name].members(rank) for name in GROUPS[:-1]}
        embedding = tuple(self._embedding_ranks(list(group["pp"])))
        return Placement(
            rank=rank,
            tp=at["tp"],
            pp=at["pp"],
            cp=at["cp"],
            ep=at["ep"],
            dp=at["dp"],
            etp=at["etp"],
            edp=at["edp"],
            first_stage=at["pp"] == 0,
            last_stage=at["pp"] == self.pp_size - 1,
            tp_group=group["tp"],
            pp_group=group["pp"],
            cp_group=group["cp"],
            dp_group=group["dp"],
            ep_group=group["ep"],
            embedding_group=embedding if rank in embedding else (),
        )

    def important_ranks(self) -> list[int]:
        """The ranks a topology mistake shows on first, in priority order: the first and the last
        rank; per pipeline stage its first and last rank (the embedding and output layers live on
        the first and last stage); per stage the first and last member of its first
        expert-parallel group (the ranks holding the first and the last local experts)."""
        firsts: dict[int, int] = {}
        lasts: dict[int, int] = {}
        for rank, stage in enumerate(self._index["pp"].position):
            firsts.setdefault(stage, rank)
            lasts[stage] = rank
        out = [0, self.world - 1]
        for stage in sorted(firsts):
            out += [firsts[stage], lasts[stage]]
        for stage in sorted(firsts):
            ep_group = self._index["ep"].members(firsts[stage])
            out += [ep_group[0], ep_group[-1]]
        return list(dict.fromkeys(out))


def sample_ranks(layout: Layout, count: int, seed: int) -> list[int]:
    """`count` ranks: the important ones first (cut to `count` in priority order), then others drawn
    at random with `seed`; sorted."""
    chosen = layout.important_ranks()[:count]
    taken = set(chosen)
    need = min(count, layout.world) - len(chosen)
    rng = random.Random(seed)
    while need > 0:  # rejection sampling: never builds a list of all ranks
        rank = rng.randrange(layout.world)
        if rank not in taken:
            taken.add(rank)
            chosen.append(rank)
            need -= 1
    return sorted(chosen)


def observe(rank: int) -> Placement:
    """This process's placement as megatron's parallel state holds it (after DISTRIBUTED)."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    def members(group: ProcessGroup) -> tuple[int, ...]:
        return tuple(dist.get_process_group_ranks(group))

    embedding = members(ps.get_embedding_group()) if ps.is_rank_in_embedding_group(ignore_virtual=True) else ()
    return Placement(
        rank=rank,
        tp=ps.get_tensor_model_parallel_rank(),
        pp=ps.get_pipeline_model_parallel_rank(),
        cp=ps.get_context_parallel_rank(),
        ep=ps.get_expert_model_parallel_rank(),
        dp=ps.get_data_parallel_rank(),
        etp=ps.get_expert_tensor_parallel_rank(),
        edp=ps.get_expert_data_parallel_rank(),
        first_stage=ps.is_pipeline_first_stage(ignore_virtual=True),
        last_stage=ps.is_pipeline_last_stage(ignore_virtual=True),
        tp_group=members(ps.get_tensor_model_parallel_group()),
        pp_group=members(ps.get_pipeline_model_parallel_group()),
        cp_group=tuple(ps.get_context_parallel_global_ranks()),
        dp_group=members(ps.get_data_parallel_group()),
        ep_group=members(ps.get_expert_model_parallel_group()),
        embedding_group=embedding,
    )


def parse_ranks(text: str, world: int) -> list[int]:
    """`0,37,4095` or ranges `0-7,4095` → sorted distinct ranks; ValueError naming the bad item."""
    out: set[int] = set()
    for item in (part.strip() for part in text.split(",")):
        first, dash, last = item.partition("-")
        try:
            low, high = int(first), int(last if dash else first)
        except ValueError:
            raise ValueError(f"{item!r} is not a rank or a range like 0-7") from None
        if not 0 <= low <= high < world:
            raise ValueError(f"{item!r} is outside [0, {world}) or a range that runs backwards")
        out.update(range(low, high + 1))
    return sorted(out)


def format_ranks(ranks: Sequence[int], shown: int = 8) -> str:
    """`0-3,7,4095`, cut after `shown` spans."""
    spans: list[str] = []
    ordered = sorted(set(ranks))
    start = 0
    for i in range(1, len(ordered) + 1):
        if i == len(ordered) or ordered[i] != ordered[i - 1] + 1:
            low, high = ordered[start], ordered[i - 1]
            spans.append(str(low) if low == high else f"{low}-{high}")
            start = i
    return ",".join(spans[:shown]) + (",…" if len(spans) > shown else "")
