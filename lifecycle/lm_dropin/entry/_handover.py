"""What the drop-in's `pretrain` leaves up when it returns: what Megatron-LM's `pretrain` leaves up.

Megatron-LM's `pretrain` returns with the default process group, megatron's parallel state (its
groups, the RNG tracker), the rerun state machine and its global variables (`get_args()`,
tokenizer, timers, writers, micro-batch calculator) still up; scripts log with
`torch.distributed.get_rank()`, evaluate, save, or tear down themselves afterwards. Once
`train()` and what `pretrain` runs after it have returned, the drop-in hands those over: the
shutdown's releases of DISTRIBUTED and SERVICES_READY leave them as they are, record
`resources_handed_over` (the state, the resources), and the ledger counts them as no longer the
lifecycle's. The lifecycle's own resources are released as always: the rank watch (its thread
stopped, this rank marked done), the CPU stand-ins, the tripwires, the log. A later
`destroy_process_group` by the script, or the process's exit, ends the rest.

A startup that fails, or a `train()` that raises, hands nothing over: everything is released.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from lifecycle.core_entry.services_ready import without_services
from lifecycle.lm_dropin.entry._left_up import LEFT, adopted_release, handed_over, made_groups_gone
from lifecycle.lm_dropin.entry._resources import GLOBALS
from lifecycle.log import records
from lifecycle.runtime import Entry, PhaseContext, Runtime, rank_of, world_size_of
from states import State

Probe = Callable[[], bool]
GROUP_OBJECTS = "process group objects (their gloo sockets)"

MEGATRON_LMS = {
    State.DISTRIBUTED: frozenset(
        {
            "process group",
            "megatron parallel state",
            "RNG tracker states",
            GROUP_OBJECTS,
            "rerun state machine",
        }
    ),
}
"""By state, the ledger's entries that Megatron-LM's `pretrain` leaves up; all of SERVICES_READY's
are Megatron-LM's global variables (`_resources.GLOBALS`, the micro-batch calculator)."""


class HandOver:
    """Whether `pretrain` returned from training, so that what Megatron-LM leaves up is the caller's."""

    def __init__(self) -> None:
        self.done = False

    def __call__(self) -> None:
        self.done = True

    def kept(self, state: State, name: str) -> bool:
        """Whether entry `name` of `state` stays up for the caller once handed over."""
        return state is State.SERVICES_READY or name in MEGATRON_LMS.get(state, ())

    def probes(self, state: State, made: list[tuple[str, Probe]]) -> list[tuple[str, Probe]]:
        """`made` with each entry the caller keeps counted as gone once handed over; an adopted process
        group is not the lifecycle's at all."""
        adopted = LEFT.adopted and state is State.DISTRIBUTED
        mine = [(name, probe) for name, probe in made if not (adopted and name == "process group")]
        if adopted:  # of the groups, only those made over the script's world are the lifecycle's
            mine = [(n, made_groups_gone() if n == GROUP_OBJECTS else p) for n, p in mine]
        return [(name, self._mine(probe) if self.kept(state, name) else probe) for name, probe in mine]

    def _mine(self, probe: Probe) -> Probe:
        return lambda: self.done or probe()


def releasing_distributed(handover: HandOver, ctx: PhaseContext, release: Entry) -> Runtime:
    """DISTRIBUTED's release; once handed over, only the lifecycle's part of it: the rank watch
    stopped and the CPU stand-ins closed, the process group and parallel state left up."""
    runtime = ctx.runtime
    if not handover.done or not runtime.distributed:
        if not LEFT.adopted:
            return release(ctx)
        adopted_release(runtime)  # the script's process group is never the lifecycle's to destroy
        return _released(runtime)
    try:
        if runtime.rank_watch is not None:
            runtime.rank_watch.stop()
    finally:
        if runtime.group_watch is not None:
            runtime.group_watch.close()
        if runtime.rehearsal is not None:
            runtime.rehearsal.close()
    kept = sorted(MEGATRON_LMS[State.DISTRIBUTED])
    ctx.emit(records.ResourcesHandedOver(state=State.DISTRIBUTED.name, resources=kept))
    handed_over(kept, made_process_group=not LEFT.adopted)
    return _released(runtime)


def _released(runtime: Runtime) -> Runtime:
    """`runtime` without DISTRIBUTED's resources."""
    return dataclasses.replace(
        runtime,
        distributed=False,
        rank=rank_of(runtime.config),
        world_size=world_size_of(runtime.config),
        backend=None,
        pg_collection=None,
        rehearsal=None,
        rank_watch=None,
        group_watch=None,
    )


def releasing_services(handover: HandOver, ctx: PhaseContext, release: Entry) -> Runtime:
    """SERVICES_READY's release; once handed over, Megatron-LM's global variables are left set."""
    if not handover.done:
        return release(ctx)
    from megatron.core import num_microbatches_calculator as calculator
    from megatron.training import global_vars

    kept = [name for var, name in GLOBALS.items() if getattr(global_vars, var, None) is not None]
    if getattr(calculator, "_GLOBAL_NUM_MICROBATCHES_CALCULATOR", None) is not None:
        kept.append("Megatron-LM micro-batch calculator")
    ctx.emit(records.ResourcesHandedOver(state=State.SERVICES_READY.name, resources=sorted(kept)))
    handed_over(sorted(kept))
    return dataclasses.replace(without_services(ctx.runtime), megatron_lm_globals=False)
