"""How many process groups one rank of a large job creates, and how many it belongs to: megatron's
real `initialize_model_parallel`, run by the engine's DISTRIBUTED for one rank on torch's fake
backend, with `torch.distributed`'s group constructors wrapped to record each call.

Under `distributed.groups: megatron` every rank calls `new_group` for every group of the job,
members or not (torch names a group by a counter, so all ranks must make the same calls in the same
order): O(world) calls a rank, of which it belongs to a fixed handful (Megatron-LM #5214); the time
of the non-member calls is measured here (`non_member_s`), and so is megatron's own loops that build
every group's rank list (`megatron_s`). Under `own` (core_entry/groups.py) a rank builds and creates
only its own groups, with `use_local_synchronization=True`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from lifecycle.config import RunConfig
from lifecycle.core_entry.groups import Creation
from lifecycle.log import JSONValue

if TYPE_CHECKING:
    from lifecycle.engine import Lifecycle

P = ParamSpec("P")
R = TypeVar("R")

GROUP_CONSTRUCTORS = ("new_group", "new_subgroups", "new_subgroups_by_enumeration", "split_group")


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupCount:
    """What one rank's DISTRIBUTED created: group constructor calls, by megatron's group description
    (`created`, `member`), and where the time went (CPU seconds)."""

    world_size: int
    rank: int
    creation: str
    created: int
    member: int
    local_synchronization: int
    by_kind: dict[str, tuple[int, int]]
    distributed_s: float
    member_s: float
    non_member_s: float
    state_s: dict[str, float] = dataclasses.field(default_factory=dict)
    """Wall seconds of each state the rank entered (VALIDATED's without megatron's first import)."""

    @property
    def megatron_s(self) -> float:
        """DISTRIBUTED's time outside torch's group constructors (megatron building rank lists)."""
        return max(0.0, self.distributed_s - self.member_s - self.non_member_s)

    def to_json(self) -> dict[str, JSONValue]:
        return {
            "creation": self.creation,
            "created": self.created,
            "member": self.member,
            "local_synchronization": self.local_synchronization,
            "with_local_synchronization": self.member,
            "by_kind": {kind: {"created": c, "member": m} for kind, (c, m) in sorted(self.by_kind.items())},
            "distributed_cpu_s": round(self.distributed_s, 3),
            "new_group_member_cpu_s": round(self.member_s, 3),
            "new_group_non_member_cpu_s": round(self.non_member_s, 3),
            "megatron_rank_lists_cpu_s": round(self.megatron_s, 3),
        }


class _Recorder:
    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.created = self.member = self.local = 0
        self.by_kind: dict[str, list[int]] = {}
        self.member_s = self.non_member_s = 0.0
        self.depth = 0  # new_subgroups* call new_group inside: count the outer call only

    def record(self, kind: str, groups: list[list[int]] | None, local: bool, seconds: float) -> None:
        sizes = groups if groups is not None else [[]]
        mine = sum(1 for g in sizes if not g or self.rank in g)
        row = self.by_kind.setdefault(kind, [0, 0])
        row[0] += len(sizes)
        row[1] += mine
        self.created += len(sizes)
        self.member += mine
        self.local += len(sizes) if local else 0
        if mine:
            self.member_s += seconds
        else:
            self.non_member_s += seconds


def _ranks_of(name: str, args: tuple[object, ...], kwargs: dict[str, object]) -> list[list[int]] | None:
    """The rank lists a constructor call creates groups for (None: the whole world)."""
    if name == "new_group":
        ranks = kwargs.get("ranks", args[0] if args else None)
        return None if ranks is None else [list(ranks)]  # type: ignore[call-overload]  # a sequence of ints
    if name == "new_subgroups_by_enumeration":
        lists = kwargs.get("ranks_per_subgroup_list", args[0] if args else [])
        return [list(r) for r in lists]  # type: ignore[attr-defined]  # a sequence of sequences
    if name == "split_group":
        lists = kwargs.get("split_ranks", args[1] if len(args) > 1 else [])
        return [list(r) for r in lists]  # type: ignore[attr-defined]
    return None


def _recorded(name: str, original: Callable[P, R], recorder: _Recorder) -> Callable[P, R]:
    @functools.wraps(original)
    def recorded(*args: P.args, **kwargs: P.kwargs) -> R:
        recorder.depth += 1
        started = time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            recorder.depth -= 1
            if recorder.depth == 0:
                local = bool(kwargs.get("use_local_synchronization", False))
                recorder.record(
                    str(kwargs.get("group_desc") or name),
                    _ranks_of(name, args, kwargs),
                    local,
                    time.process_time() - started,
                )

    return recorded


@contextlib.contextmanager
def _recording(rank: int) -> Iterator[_Recorder]:
    import torch.distributed as dist

    recorder = _Recorder(rank)
    saved = {name: getattr(dist, name) for name in GROUP_CONSTRUCTORS if hasattr(dist, name)}
    for name, original in saved.items():
        setattr(dist, name, _recorded(name, original, recorder))
    try:
        yield recorder
    finally:
        for name, original in saved.items():
            setattr(dist, name, original)


def count_groups(
    config: RunConfig, *, world_size: int | None = None, rank: int = 0, creation: Creation | None = None
) -> GroupCount:
    """Drive `rank` of `config` (at `world_size`) through the real engine to DISTRIBUTED on the fake
    backend, its groups created as `creation` says (default: the config's `distributed.groups`),
    recording every group constructor call; then shut it down. ConfigError when the config is
    invalid (as `prepare` raises it)."""
    from lifecycle.engine import Lifecycle
    from lifecycle.simulate._simulation import at_rank, prepare, warm_up

    if creation is not None:
        config = dataclasses.replace(config, distributed=dataclasses.replace(config.distributed, groups=creation))
    simulated = prepare(config, world_size=world_size)
    world = simulated.parallel.world_size or 1
    warm_up(simulated)  # the tokenizer module's first import is not SERVICES_READY's time
    lc = Lifecycle(
        at_rank(simulated, rank),
        None,
        None,
        run_id="sim-groups",
        options={"environment_checks": False, "capture_warnings": False},
    )
    try:
        recorder, seconds, state_s = _drive_to_distributed(lc, rank)
    finally:
        lc.shutdown()
    return GroupCount(
        world_size=world,
        rank=rank,
        creation=simulated.distributed.groups,
        created=recorder.created,
        member=recorder.member,
        local_synchronization=recorder.local,
        by_kind={kind: (c, m) for kind, (c, m) in recorder.by_kind.items()},
        distributed_s=seconds,
        member_s=recorder.member_s,
        non_member_s=recorder.non_member_s,
        state_s=state_s,
    )


def _drive_to_distributed(lc: Lifecycle, rank: int) -> tuple[_Recorder, float, dict[str, float]]:
    """Advance `lc` state by state to DISTRIBUTED, recording the group constructor calls of that last
    state. Returns the recorder, DISTRIBUTED's CPU seconds, and each state's wall seconds."""
    from states import STARTUP_ORDER, State

    state_s: dict[str, float] = {}
    for state in STARTUP_ORDER[1 : STARTUP_ORDER.index(State.DISTRIBUTED)]:
        wall = time.perf_counter()
        lc.advance_to(state)
        state_s[state.name] = time.perf_counter() - wall
    with _recording(rank) as recorder:
        started, wall = time.process_time(), time.perf_counter()
        lc.advance_to(State.DISTRIBUTED)
        seconds = time.process_time() - started
        state_s[State.DISTRIBUTED.name] = time.perf_counter() - wall
    return recorder, seconds, state_s
