"""Own groups only: megatron's `initialize_model_parallel`, each rank creating only its own groups.

megatron-core builds the rank list of every group of the job on every rank and calls `new_group` for
each, member or not (Megatron-LM #5214): O(world) work a rank, 490,861 calls at 131,072 ranks. Under
`distributed.groups: own` (`own_groups`) megatron's own function runs with three things changed
while it runs, so every global it sets (groups, rank lists, gloo twins, embedding, hierarchical
context-parallel and expert groups, `_global_process_group_list`) is set by megatron's code:

- `RankGenerator.get_ranks(token)` returns only the group of that kind holding this rank, computed
  directly from the generator's order and sizes in O(group size) (`own_ranks`). For `tp-ep-pp`,
  which megatron also concatenates in blocks into the distributed optimizer's instance group, it
  returns the block of groups holding this rank: that group's members are the block's.
- megatron's `create_group` asks torch for `use_local_synchronization=True` (no store barrier of the
  whole world even with `TORCH_DIST_INIT_BARRIER=1`), and a call for a group the rank is not in (an
  embedding group on a middle stage, the other levels of a hierarchical group, the other groups of a
  `tp-ep-pp` block) returns torch's `NON_GROUP_MEMBER` at once, as torch would, without calling it.
- torch names such a group by a hash of its ranks salted with a per-process count (torch 2.13:
  `len(_world.pg_names)`, 2.14: `_world.group_count`) that differs between the members of a group
  once a rank has made a group the others did not (a first stage's position embedding group); the
  members would then meet under different store prefixes and wait forever. Here each group is named
  by its ranks and how many groups with the same ranks this creation made before it, which every
  member computes alike.

Costs: O(sum of the rank's group sizes) CPU and about 20 `new_group` calls a rank, whatever the
world size; nothing at the store at creation (gloo's groups connect their members as before).
Group names differ from megatron's counter names; ranks, backend, timeout and `group_desc` do not.
Not possible when the world's communicator was created eagerly (`init_process_group(device_id=...)`):
NCCL then splits each group from the world, a collective of every rank (DistributedError).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import Any, Literal

from lifecycle.errors import DistributedError

Creation = Literal["own", "megatron"]
_BLOCKED = "tp-ep-pp"
"""The token whose groups megatron concatenates, `intra_partial_expert_data_parallel_size` at a time,
into `_INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP` (megatron-core 0.15.3 to 0.19)."""


def initialize_model_parallel(creation: Creation, **kwargs: Any) -> None:
    """megatron's `parallel_state.initialize_model_parallel(**kwargs)`, its groups created as `creation` says."""
    from megatron.core import parallel_state

    if creation == "megatron":
        parallel_state.initialize_model_parallel(**kwargs)
        return
    with own_groups(num_distributed_optimizer_instances=int(kwargs.get("num_distributed_optimizer_instances", 1))):
        parallel_state.initialize_model_parallel(**kwargs)


def own_ranks(
    order: str, sizes: list[int], token: str, rank: int, *, offset: int = 0, block: int = 1
) -> list[list[int]]:
    """The groups of `token` holding `rank` (with `block` > 1, the `block` consecutive groups around
    it), as `RankGenerator(order, sizes).get_ranks(token)` lists them; [] when `rank` is outside."""
    local, world = rank - offset, _product(sizes)
    if not 0 <= local < world:
        return []
    names = order.split("-")
    masked = {name for name in token.split("-")}
    strides = [_product(sizes[:i]) for i in range(len(sizes))]
    offsets = [0]
    for name, size, stride in zip(names, sizes, strides, strict=True):
        if name in masked:
            offsets = [o + i * stride for i in range(size) for o in offsets]
    unmasked = [(size, stride) for name, size, stride in zip(names, sizes, strides, strict=True) if name not in masked]
    index, count = 0, 1
    for size, stride in unmasked:
        index += (local // stride) % size * count
        count *= size
    first = index - index % block
    groups = []
    for g in range(first, min(first + block, count)):
        base, rest = offset, g
        for size, stride in unmasked:
            base, rest = base + rest % size * stride, rest // size
        groups.append([base + o for o in offsets])
    return groups


def _product(values: list[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out


class _Own:
    """One own creation's state: this rank's groups, their names, megatron's and torch's originals.

    Names: a group's ranks, how many groups with the same ranks this creation made before it, and
    the world's group count when the creation's first group was made (the same on every rank: torch
    advances it on every rank for each world-wide group), which every member computes alike."""

    def __init__(self, instances: int) -> None:
        from megatron.core import parallel_state as ps
        from torch.distributed import distributed_c10d as c10d

        self.instances, self.salt, self.next = instances, -1, ""
        self.seen: dict[tuple[int, ...], int] = {}
        self.create, self.name = ps.create_group, c10d._process_group_name

    def begin(self) -> int:
        """This rank; on the creation's first call, check the world and take the salt."""
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d

        if self.salt < 0:
            if getattr(c10d._get_default_group(), "bound_device_id", None) is not None:
                raise DistributedError(
                    "distributed.groups=own cannot create megatron's groups on a world made with a device_id "
                    "(NCCL splits every group from the world, a collective of all ranks); set "
                    "distributed.groups=megatron",
                    field="distributed.groups",
                )
            self.salt = c10d._world.group_count
        return int(dist.get_rank())

    def ranks(self, generator: Any, token: str) -> list[list[int]]:
        names, sizes = generator.order.split("-"), list(generator.ordered_size)
        block = 1
        if token == _BLOCKED:
            block = _product([s for n, s in zip(names, sizes, strict=True) if n not in ("tp", "ep", "pp")])
            block = max(1, block // self.instances)
        rank = self.begin()
        return own_ranks(generator.order, sizes, token, rank, offset=generator.rank_offset, block=block)

    def create_group(self, ranks: list[int] | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        import torch.distributed as dist
        from megatron.core import parallel_state as ps

        kwargs["use_local_synchronization"] = True
        rank = self.begin()
        if ranks is not None and rank not in ranks:  # what torch returns for it, without the call
            if ps._global_process_group_list is None:
                ps._global_process_group_list = [None]  # as megatron's create_group starts it
            return dist.GroupMember.NON_GROUP_MEMBER
        if ranks is not None:
            key = tuple(ranks)
            n = self.seen[key] = self.seen.get(key, -1) + 1
            text = f"{'_'.join(map(str, key))}/{n}/{self.salt}"
            self.next = hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()
        try:
            return self.create(ranks, *args, **kwargs)
        finally:
            self.next = ""

    def process_group_name(self, ranks: Any, use_hashed_name: bool) -> Any:
        if not self.next:
            return self.name(ranks, use_hashed_name)
        name, self.next = self.next, ""
        return name


@contextlib.contextmanager
def own_groups(*, num_distributed_optimizer_instances: int = 1) -> Iterator[None]:
    """While it is open, megatron's `initialize_model_parallel` creates only this rank's groups (see
    the module): open it around megatron's call, or around a function that makes the world and then
    calls it once (Megatron-LM's `_initialize_distributed`). DistributedError at the first group
    when the world's communicator was created eagerly."""
    from megatron.core import parallel_state as ps
    from torch.distributed import distributed_c10d as c10d

    own = _Own(num_distributed_optimizer_instances)
    original = ps.RankGenerator.get_ranks

    def get_ranks(generator: Any, token: str) -> list[list[int]]:
        return own.ranks(generator, token)

    def create_group(ranks: list[int] | None = None, *args: Any, **kwargs: Any) -> Any:  # megatron's name
        return own.create_group(ranks, args, kwargs)

    ps.RankGenerator.get_ranks = get_ranks  # restored below
    ps.create_group, c10d._process_group_name = create_group, own.process_group_name
    try:
        yield
    finally:
        ps.RankGenerator.get_ranks = original
        ps.create_group, c10d._process_group_name = own.create, own.name
        if own.salt >= 0:
            c10d._world.group_count = own.salt + 1  # the next creation's names differ from these on every rank
