"""DISTRIBUTED with Megatron-LM's functions, in `initialize_megatron`'s order, then the JIT warm-up
that `pretrain` runs right after it (it draws random numbers: the same draws in the same order
reproduce Megatron-LM's losses).

Once Megatron-LM's `_initialize_distributed` has made the process group, a multi-rank job gets the
lifecycle's rank watch on its store (`lifecycle.rankwatch`, as the lifecycle's own DISTRIBUTED
starts it): the rest of startup and every `train_step` run under the failure broadcast, so a rank
that fails is named on every rank (`peer_failed`) and no rank waits for it past the grace."""

from __future__ import annotations

import dataclasses
import os
from argparse import Namespace
from contextlib import nullcontext
from typing import TYPE_CHECKING

from lifecycle import launchers
from lifecycle.core_entry.distributed import log_initialized, stay_alive
from lifecycle.errors import DistributedError
from lifecycle.lm_dropin.entry._late import INITIALIZE, TRAINING, late
from lifecycle.lm_dropin.entry._left_up import LEFT, adopting, destroy_made_groups, end_parallel_state, refuse_if_left
from lifecycle.log import records
from lifecycle.rankwatch import RankWatch, WatchSettings, local_size, lone_watch
from lifecycle.runtime import PhaseContext, Runtime
from states import SideEffect

if TYPE_CHECKING:
    import torch
    from megatron.core.process_groups_config import MultiModuleProcessGroupCollection, ProcessGroupCollection
    from torch.distributed import Store

    from lifecycle.lm_dropin.entry._call import MegatronLMCall


class CpuStandIns:
    """The CPU rehearsal and the patches `megatron.training` needs on top (`_cuda.py`); one close."""

    def __init__(self) -> None:
        from lifecycle.core_entry.rehearsal import start_rehearsal
        from lifecycle.lm_dropin.entry._cuda import Patched, extra_patches

        self.rehearsal = start_rehearsal()
        try:
            self.extra = Patched().install(extra_patches())
        except BaseException:
            self.rehearsal.close()
            raise

    def close(self) -> None:
        try:
            self.extra.restore()
        finally:
            self.rehearsal.close()


def _rerun_state_machine(args: Namespace) -> None:
    """`initialize_megatron`'s rerun state machine, with its RNG-tracker save and restore; each name
    looked up in `megatron.training.initialize` when `initialize_megatron` would (`_late.py`)."""

    def state_save_func() -> dict[str, dict[str, torch.Tensor]]:
        return {"rng_tracker_states": late(INITIALIZE, "tensor_parallel").get_cuda_rng_tracker().get_states()}

    def state_restore_func(state_dict: dict[str, dict[str, torch.Tensor]]) -> None:
        if state_dict["rng_tracker_states"]:
            late(INITIALIZE, "tensor_parallel").get_cuda_rng_tracker().set_states(state_dict["rng_tracker_states"])

    late(INITIALIZE, "initialize_rerun_state_machine")(
        state_save_func=state_save_func,
        state_restore_func=state_restore_func,
        mode=late(INITIALIZE, "RerunMode")(args.rerun_mode),
        error_injector=late(INITIALIZE, "RerunErrorInjector")(
            error_injection_rate=args.error_injection_rate,
            error_injection_type=late(INITIALIZE, "RerunDiagnostic")(args.error_injection_type),
        ),
        result_rejected_tracker_filename=args.result_rejected_tracker_filename,
    )


def _seed(ctx: PhaseContext, call: MegatronLMCall) -> None:
    from megatron.training import initialize as mi

    args, groups = call.args, call.pg_collection
    if isinstance(groups, late(TRAINING, "MultiModuleProcessGroupCollection")):
        return  # pretrain leaves a multi-module collection's seeds to its caller
    ctx.side_effect(SideEffect.RNG)
    mi._set_random_seed(
        args.seed,
        args.data_parallel_random_init,
        args.te_rng_tracker,
        args.inference_rng_tracker,
        use_cudagraphable_rng=args.cuda_graph_impl != "none",
        pp_group=getattr(groups, "pp", None),
        dp_group=getattr(groups, "dp", None),
        tp_group=getattr(groups, "tp", None),
        ep_group=getattr(groups, "ep", None),
        etp_group=getattr(groups, "expt_tp", None),
    )


def _groups(ctx: PhaseContext, call: MegatronLMCall) -> None:
    """Process group (unless adopted) and parallel state: Megatron-LM's `_initialize_distributed`,
    its groups created as `distributed.groups` says (`own`: each rank only its own, groups.py)."""
    import torch.distributed as dist
    from megatron.training import initialize as mi

    from lifecycle.core_entry.groups import own_groups

    if not LEFT.adopted:
        ctx.side_effect(SideEffect.PROCESS_GROUP)
    ctx.side_effect(SideEffect.PARALLEL_STATE)
    instances = int(getattr(call.args, "num_distributed_optimizer_instances", 1) or 1)
    own = ctx.runtime.config.distributed.groups == "own"
    with own_groups(num_distributed_optimizer_instances=instances) if own else nullcontext():
        mi._initialize_distributed(
            call.get_embedding_ranks,
            call.get_position_embedding_ranks,
            call.store,
            skip_model_parallel_init=call.skip_model_parallel_init,
        )
    ctx.set_rank(rank=dist.get_rank(), world_size=dist.get_world_size())


def initialize(ctx: PhaseContext, call: MegatronLMCall) -> Runtime:
    """Rehearsal (without CUDA), rerun state machine, groups, seeds, autoresume, dataset helper,
    TP communicators, JIT warm-up; a failure part-way undoes what was created."""
    import torch
    import torch.distributed as dist

    from lifecycle.core_entry.distributed import decide_rehearsal

    args = call.args
    refuse_if_left()
    adopted = _adopt(ctx)
    on, reason = decide_rehearsal(ctx.runtime.config.rehearsal, bool(torch.cuda.is_available()))
    if on:
        ctx.side_effect(SideEffect.CUDA_DEVICE)
    stand_ins = CpuStandIns() if on else None
    rerun = False  # made here: Megatron-LM refuses a second one, and the script's is left as it was
    try:
        ctx.emit((records.RehearsalEnabled if on else records.RehearsalDisabled)(reason=reason))
        late(INITIALIZE, "setup_logging")()  # --logging-level, or MEGATRON_LOGGING_LEVEL
        _rerun_state_machine(args)
        rerun = True
        if args.batch_invariant_mode:
            late(INITIALIZE, "enable_batch_invariant_mode")()
        groups, watch = _initialize_megatron(ctx, call)
    except BaseException:
        _undo(stand_ins, rerun, adopted=adopted)
        raise
    _emit_initialized(ctx, args)
    return dataclasses.replace(
        ctx.runtime,
        distributed=True,
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        backend=args.distributed_backend,
        pg_collection=groups,
        rehearsal=stand_ins,
        rank_watch=watch,
    )


def _initialize_megatron(
    ctx: PhaseContext, call: MegatronLMCall
) -> tuple[ProcessGroupCollection | MultiModuleProcessGroupCollection, RankWatch | None]:
    """`initialize_megatron`'s steps after the rerun state machine, then `pretrain`'s JIT warm-up; the
    process groups, and the rank watch of a multi-rank job (stopped here if what follows it fails)."""
    _groups(ctx, call)
    watch = _watch(ctx, call)
    try:
        with watch.phase(ctx, "DISTRIBUTED") if watch is not None else nullcontext():
            _after_groups(ctx, call)
    except BaseException:
        if watch is not None:
            watch.stop()
        raise
    return call.pg_collection or late(TRAINING, "ProcessGroupCollection").use_mpu_process_groups(), watch


def _watch(ctx: PhaseContext, call: MegatronLMCall) -> RankWatch | None:
    """The rank watch of a multi-rank job, checked in and started on the process group's store, under
    this generation's prefix; a lone watch (its deadlines only) for one rank; none for a fake process
    group. Under a restart wrapper
    (`store=`) the watcher never ends the process: the wrapper restarts it in place."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    if call.args.fake_process_group:
        return None
    if dist.get_world_size() == 1:  # under a restart wrapper (`store=`) its own timeouts bound it
        return lone_watch(WatchSettings.of(ctx.runtime.config)) if call.store is None else None
    base: Store = distributed_c10d._get_default_store()
    store = dist.PrefixStore(f"megatron-lifecycle/ranks/generation-{ctx.runtime.generation}", base)
    watch = RankWatch(
        store,
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        settings=WatchSettings.of(ctx.runtime.config),
        watcher_store=store.clone,
        store_host=None if launchers.agent_store() else 0,
        exit_process=stay_alive if call.store is not None else os._exit,
        interruptible=call.store is not None,
        meeting=f"{launchers.job_id()}:{dist.get_world_size()}:{launchers.rendezvous()}:{ctx.runtime.generation}",
        local_size=local_size(),
    )
    watch.check_in(ctx)
    watch.start()
    return watch


def _after_groups(ctx: PhaseContext, call: MegatronLMCall) -> None:
    """Seeds, the MoE auxiliary loss's scale, autoresume, the dataset helper, TP communicators and the
    JIT warm-up, as Megatron-LM's `initialize_megatron` does them."""
    from megatron.training import initialize as mi

    args = call.args
    _seed(ctx, call)
    if args.num_experts is not None:  # the MoE auxiliary loss's scale until a schedule sets it (1)
        import torch
        from megatron.core.transformer.moe.router import MoEAuxLossAutoScaler

        MoEAuxLossAutoScaler.set_loss_scale(torch.ones(1, device=torch.cuda.current_device()))
    mi._init_autoresume()
    mi._compile_dependencies()
    if args.tp_comm_overlap:
        mi._initialize_tp_communicators()
    if call.cfg_container.logger.log_progress:
        late(TRAINING, "append_to_progress_log")(args.save, "Starting job")
    late(TRAINING, "set_jit_fusion_options")(tp_size=args.tensor_model_parallel_size)


def _emit_initialized(ctx: PhaseContext, args: Namespace) -> None:
    """The DISTRIBUTED_INITIALIZED record, with this rank's place in each group as megatron formed it."""
    from megatron.core import parallel_state as ps

    coords = {
        "tp": ps.get_tensor_model_parallel_rank(),
        "pp": ps.get_pipeline_model_parallel_rank(),
        "cp": ps.get_context_parallel_rank(),
        "ep": ps.get_expert_model_parallel_rank(),
        "dp": ps.get_data_parallel_rank(),
    }
    log_initialized(ctx, args.distributed_backend, coords)


def _adopt(ctx: PhaseContext) -> bool:
    """Whether the process group is the script's, taken as Megatron-LM's `_initialize_distributed`
    takes it (recorded `process_group_adopted`: backend, world size, rank and timeout, read back
    here: no store operation); a parallel state made outside is refused."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    from lifecycle.core_entry.distributed import refuse_if_initialized
    from lifecycle.core_entry.timeouts import seconds

    LEFT.adopted = False
    if not (dist.is_available() and dist.is_initialized()):
        refuse_if_initialized()  # a parallel state without a process group, made outside
        return False
    if parallel_state.model_parallel_is_initialized():
        raise DistributedError(
            "megatron's parallel state is already initialized over the script's process group, outside "
            "this lifecycle; call parallel_state.destroy_model_parallel() first (the process group may stay)",
            field="parallel",
        )
    adopting()
    world = dist.distributed_c10d._get_default_group()
    ctx.emit(
        records.ProcessGroupAdopted(
            backend=str(dist.get_backend()),
            world_size=dist.get_world_size(),
            rank=dist.get_rank(),
            timeout_s=seconds(world),
        )
    )
    return True


def _undo(stand_ins: CpuStandIns | None, rerun_state_machine: bool, *, adopted: bool) -> None:
    """What a failed DISTRIBUTED made: parallel state, process group (not an `adopted` one: the
    script's), the rerun state machine (when it made it: `rerun_state_machine`), stand-ins."""
    import torch.distributed as dist
    from megatron.core.rerun_state_machine import destroy_rerun_state_machine

    try:
        end_parallel_state()
        if adopted:
            destroy_made_groups()
        elif dist.is_initialized():
            dist.destroy_process_group()
        if rerun_state_machine:  # DISTRIBUTED's release, which would, runs only once it was entered
            destroy_rerun_state_machine()
    finally:
        if stand_ins is not None:
            stand_ins.close()
