"""What the drop-in's `pretrain` left up in this process and who made it, a process group it adopted,
and `teardown()`, which ends what a second `pretrain` in the same process needs ended.

Megatron-LM's `pretrain` returns with its process group, parallel state, rerun state machine,
micro-batch calculator and global variables up (`_handover.py`); a second call then fails (the rerun
state machine refuses a second one, `set_global_variables` refuses set arguments). The drop-in's
DISTRIBUTED names what an earlier call left up (`refuse_if_left`); `teardown()` ends it: everything
Megatron-LM's startup sets up, except a process group the drop-in did not make (the script's, which
it adopted), which stays the script's. One process-wide record (`LEFT`), since what it describes is
process-wide too.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lifecycle.errors import DistributedError

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

    from lifecycle.runtime import Runtime


@dataclass(slots=True)
class _Left:
    """What the last `pretrain` of this process handed over, and whether it made the process group."""

    resources: list[str] = field(default_factory=list)
    made_process_group: bool = False
    adopted: bool = False
    """The process group up now is the script's, adopted by a `pretrain`: never destroyed by the drop-in."""
    scripts: list[weakref.ref[ProcessGroup]] = field(default_factory=list)
    """The process groups that existed when the group was adopted (the world, the script's own)."""


LEFT = _Left()

EARLIER = (
    "this process's earlier lifecycle.lm_dropin.pretrain, which hands them over when it returns as Megatron-LM's does"
)


def handed_over(resources: list[str], *, made_process_group: bool | None = None) -> None:
    """Record what a returning `pretrain` left up (`made_process_group`: whether it made the group)."""
    LEFT.resources += [r for r in resources if r not in LEFT.resources]
    if made_process_group is not None:
        LEFT.made_process_group = made_process_group


def refuse_if_left() -> None:
    """Raise DistributedError naming what an earlier `pretrain` of this process left up, if any is
    still up, and the fix (`teardown()`)."""
    up = still_up()
    blocking = {"megatron's parallel state", "the rerun state machine"}  # a process group alone is adopted
    if not blocking.intersection(up):
        LEFT.resources.clear()  # the script ended what blocks a second call: anything up now is its own
        return
    if LEFT.resources:
        raise DistributedError(
            f"{', '.join(up)} still up, left by {EARLIER}; call lifecycle.lm_dropin.teardown() "
            "before calling pretrain again (docs/adopting.md#a-second-pretrain-in-one-process)",
            field="pretrain",
        )


def still_up() -> list[str]:
    """What of Megatron-LM's startup is up in this process now."""
    import torch.distributed as dist
    from megatron.core import num_microbatches_calculator as calculator
    from megatron.core import parallel_state, rerun_state_machine
    from megatron.training import global_vars

    up = []
    if dist.is_available() and dist.is_initialized():
        up.append("the process group" + (" (the script's, adopted)" if LEFT.adopted else ""))
    if parallel_state.model_parallel_is_initialized():
        up.append("megatron's parallel state")
    if rerun_state_machine._GLOBAL_RERUN_STATE_MACHINE is not None:
        up.append("the rerun state machine")
    if calculator._GLOBAL_NUM_MICROBATCHES_CALCULATOR is not None:
        up.append("the micro-batch calculator")
    if global_vars._GLOBAL_ARGS is not None:
        up.append("Megatron-LM's global variables")
    return up


def teardown() -> list[str]:
    """End what `pretrain` left up so that `pretrain` can run again in this process: Megatron-LM's
    global variables (writers closed) and micro-batch calculator, the rerun state machine, megatron's
    parallel state and RNG tracker, and the process group when the drop-in made it (one the script
    made stays up). Returns what it ended, in that order; nothing up, nothing ended."""
    import torch.distributed as dist
    from megatron.core import num_microbatches_calculator as calculator
    from megatron.core import parallel_state, rerun_state_machine
    from megatron.training import global_vars

    from lifecycle.lm_dropin.entry._resources import release_globals

    ended = []
    if global_vars._GLOBAL_ARGS is not None:
        ended.append("Megatron-LM's global variables")
    if calculator._GLOBAL_NUM_MICROBATCHES_CALCULATOR is not None:
        ended.append("the micro-batch calculator")
    release_globals()  # megatron-core 0.19's unset_global_variables also ends the calculator
    calculator.destroy_num_microbatches_calculator()
    if rerun_state_machine._GLOBAL_RERUN_STATE_MACHINE is not None:
        rerun_state_machine.destroy_rerun_state_machine()
        ended.append("the rerun state machine")
    if parallel_state.model_parallel_is_initialized():
        end_parallel_state()
        ended.append("megatron's parallel state")
    if LEFT.adopted:
        destroy_made_groups()
    if LEFT.made_process_group and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
        ended.append("the process group")
    LEFT.resources.clear()
    LEFT.made_process_group = False
    return ended


def end_parallel_state() -> None:
    """megatron's parallel state destroyed, the group globals `destroy_model_parallel` leaves set
    dropped (they hold gloo sockets), the RNG tracker's states reset."""
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import get_cuda_rng_tracker

    parallel_state.destroy_model_parallel()
    for name, value in list(vars(parallel_state).items()):
        if isinstance(value, dist.ProcessGroup):
            setattr(parallel_state, name, None)
    get_cuda_rng_tracker().reset()


def adopted_release(runtime: Runtime) -> None:
    """DISTRIBUTED's release with an adopted process group: the rank watch stopped, the group watch and
    CPU stand-ins closed, megatron's parallel state and the rerun state machine ended; the process
    group stays the script's."""
    from megatron.core.rerun_state_machine import destroy_rerun_state_machine

    try:
        if runtime.rank_watch is not None:
            runtime.rank_watch.stop()
    finally:
        try:
            if runtime.group_watch is not None:
                runtime.group_watch.close()
            if runtime.distributed:
                end_parallel_state()
                destroy_made_groups()
                destroy_rerun_state_machine()
        finally:
            if runtime.rehearsal is not None:
                runtime.rehearsal.close()


def adopting() -> None:
    """Mark the process group up now as the script's, with every group that exists now."""
    LEFT.adopted = True
    LEFT.scripts = [weakref.ref(group) for group in _groups()]


def made_groups() -> list[ProcessGroup]:
    """The process groups alive now that did not exist when the group was adopted (megatron's)."""
    scripts = {id(group) for ref in LEFT.scripts if (group := ref()) is not None}
    return [group for group in _groups() if id(group) not in scripts]


def made_groups_gone() -> Callable[[], bool]:
    """A probe: true once none of the groups made over the adopted one so far is alive."""
    refs = [weakref.ref(group) for group in made_groups()]
    return lambda: all(ref() is None for ref in refs)


def destroy_made_groups() -> None:
    """Destroy the groups made over the adopted process group (megatron's parallel state's, which
    `destroy_model_parallel` leaves in torch's registry with their gloo sockets open)."""
    import torch.distributed as dist

    for group in made_groups():
        dist.destroy_process_group(group)


def _groups() -> list[ProcessGroup]:
    """Every process group in torch's registry and megatron's parallel state's globals."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    found: dict[int, ProcessGroup] = {}
    for group in list(getattr(getattr(dist.distributed_c10d, "_world", None), "pg_map", None) or {}):
        found[id(group)] = group
    for value in vars(parallel_state).values():
        if isinstance(value, dist.ProcessGroup):
            found[id(value)] = value
    return list(found.values())
