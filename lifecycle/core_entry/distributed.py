"""DISTRIBUTED: process group, megatron parallel state and RNG — rehearsed on CPU without CUDA.

Order: decide the CPU rehearsal (on when CUDA is absent unless `rehearsal` forces it), then
`torch.distributed.init_process_group` (MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE as torchrun and `run_ranks` set
them, through a TCPStore kept for re-initialization; an in-memory store and a lone watch for a single rank with
no launcher; FakeStore for the `fake` backend), then `initialize_model_parallel` (each rank's own groups
only, or megatron's creation of every group: `distributed.groups`, groups.py), then seeding with
`model_parallel_cuda_manual_seed`. A failure part-way undoes what this phase did before re-raising. The rehearsal
stays active until `release`, which must run on the thread that called `enter` (function modes are per-thread).
"""

from __future__ import annotations

import dataclasses
import os
import random
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from types import ModuleType
from typing import TYPE_CHECKING, Any

from lifecycle import launchers
from lifecycle.config import RunConfig
from lifecycle.core_entry.groups import initialize_model_parallel
from lifecycle.core_entry.rehearsal import Rehearsal, is_active, start_rehearsal
from lifecycle.core_entry.timeouts import GroupWatch, log_timeouts
from lifecycle.errors import DistributedError
from lifecycle.log import records
from lifecycle.rankwatch import (
    RankWatch,
    WatchSettings,
    await_store_host,
    checked,
    is_timeout,
    local_size,
    lone_watch,
)
from lifecycle.runtime import Closeable, PhaseContext, Runtime, rank_of, world_size_of
from states import SideEffect

if TYPE_CHECKING:
    from torch.distributed import PrefixStore, Store, TCPStore


def decide_rehearsal(flag: bool | None, cuda_available: bool) -> tuple[bool, str]:
    """(rehearse?, reason): `rehearsal` true/false forces it; null rehearses without CUDA."""
    if flag is not None:
        return flag, "forced by config" if flag else "disabled by config"
    return (False, "cuda available") if cuda_available else (True, "cuda absent")


def init_fake_process_group(rank: int, world_size: int) -> None:
    """One simulated rank of a `world_size`-rank job on torch's fake backend (no communication).

    The one place that imports torch's private `fake_pg` module.
    """
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)


def refuse_if_initialized() -> None:
    """A second initialization is refused: someone else owns the process group or parallel state."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    if dist.is_available() and dist.is_initialized():
        raise DistributedError(
            "torch.distributed is already initialized (backend "
            f"{dist.get_backend()!r}, world size {dist.get_world_size()}) by code outside this "
            "lifecycle; let the lifecycle initialize it, or destroy the process group first",
            field="backend",
        )
    if parallel_state.model_parallel_is_initialized():
        raise DistributedError(
            "megatron's parallel state is already initialized outside this lifecycle; call "
            "parallel_state.destroy_model_parallel() first",
            field="parallel",
        )


def init_process_group(ctx: PhaseContext, config: RunConfig, real_cuda: bool) -> tuple[int, int, RankWatch | None]:
    """The process group (fake, lone, or on the checked-in store): rank, world size, the started watch or None."""
    import torch
    import torch.distributed as dist

    par = config.parallel
    if config.backend == "fake":
        assert par.rank is not None and par.world_size is not None  # validation guarantees it
        ctx.side_effect(SideEffect.PROCESS_GROUP)
        init_fake_process_group(par.rank, par.world_size)
        return par.rank, par.world_size, None
    world, rank = world_size_of(config), rank_of(config)
    if real_cuda:
        ctx.side_effect(SideEffect.CUDA_DEVICE)
        torch.cuda.set_device(launchers.local_rank())
    ctx.side_effect(SideEffect.PROCESS_GROUP)
    timeout = timedelta(seconds=config.startup.timeout_s)
    if world == 1 and launchers.rendezvous() is None:
        dist.init_process_group(config.backend, store=dist.HashStore(), rank=rank, world_size=world, timeout=timeout)
        return dist.get_rank(), dist.get_world_size(), lone_watch(WatchSettings.of(config))
    store, watch = checked_in_store(ctx, config, rank, world)
    try:
        with watch.phase(ctx, "DISTRIBUTED"):
            dist.init_process_group(config.backend, store=store, rank=rank, world_size=world, timeout=timeout)
    except BaseException:
        watch.stop()
        raise
    return dist.get_rank(), dist.get_world_size(), watch


def checked_in_store(ctx: PhaseContext, config: RunConfig, rank: int, world: int) -> tuple[Store, RankWatch]:
    """The rendezvous store once every rank has checked in, and the started watcher."""
    import torch.distributed as dist

    timeout_s, mine = config.startup.timeout_s, checked(rank, world, ctx.runtime.generation)  # one world
    agent = launchers.agent_store()  # then torchrun hosts the store
    provided = _provided_store(ctx)
    try:
        store = provided or rendezvous_store(rank, world, timeout_s)
    except Exception as exc:
        if (rank == 0 and not agent) or not is_timeout(exc):
            raise
        raise store_unreachable(ctx, timeout_s, agent) from exc
    ranks = dist.PrefixStore("ranks", store)
    # Under an in-process restart wrapper (it provides the store) the process must live on to be
    # restarted in place: the watcher still logs and publishes, but never ends the process.
    watch = RankWatch(
        ranks,
        rank=rank,
        world_size=world,
        settings=WatchSettings.of(config),
        watcher_store=ranks.clone,
        store_host=None if agent else 0,  # its own connection
        exit_process=stay_alive if provided is not None else os._exit,
        interruptible=provided is not None,
        world=mine,
        meeting=f"{mine.job}:{world}:{mine.endpoint}:{mine.generation}",  # this launch's ranks (`launch_key`)
        local_size=local_size(),
    )
    watch.check_in(ctx)
    watch.start()
    return store, watch


def store_unreachable(ctx: PhaseContext, timeout_s: float, agent: bool) -> DistributedError:
    """A client rank never reached the store's host (rank 0, or torchrun's agent): log and explain."""
    where = "{}:{}".format(*launchers.rendezvous() or ("MASTER_ADDR", "MASTER_PORT"))
    host = "torchrun's agent" if agent else "rank 0"
    missing = records.UNSET if agent else [0]
    ctx.emit(records.StateTimeout(state="DISTRIBUTED", trigger=ctx.trigger.value, timeout_s=timeout_s, missing=missing))
    return DistributedError(
        f"rendezvous timed out after {timeout_s:g} s: could not reach the store at {where} that {host} "
        f"hosts{'' if agent else '; missing: rank 0'}. Start {host}, or raise startup.timeout_s",
        field="startup.timeout_s",
    )


def stay_alive(_code: int) -> None:
    """The watcher's exit under an in-process restart wrapper: the wrapper aborts and restarts."""


def _provided_store(ctx: PhaseContext) -> Store | None:
    """`Runtime.rendezvous_store` (the restart wrapper's for this cycle) under a prefix that no
    earlier rendezvous on it used (`Runtime.rendezvous_generation`); None: use MASTER_ADDR/PORT."""
    import torch.distributed as dist

    if (runtime := ctx.runtime).rendezvous_store is None:
        return None
    since = runtime.generation - runtime.rendezvous_generation  # restarts since it was provided
    return dist.PrefixStore(f"megatron-lifecycle/rendezvous-{since}", runtime.rendezvous_store)


STORES: dict[tuple[str, int], tuple[TCPStore, int]] = {}
"""(MASTER_ADDR, MASTER_PORT) -> (the TCPStore this process keeps for it, how many initializations it
served). It must outlive `destroy_process_group`: re-creating it on the same port for a restart lets a
fast rank join the previous, still-closing store and read stale keys (gloo then connects to ports that
are gone, or hangs). Each initialization uses a fresh key prefix instead. Only `rendezvous_store` adds to it."""


def rendezvous_store(rank: int, world_size: int, timeout_s: float = 600.0) -> PrefixStore:
    """A PrefixStore over this process's long-lived TCPStore for MASTER_ADDR/MASTER_PORT (env://).

    Under torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True) every rank is a client.
    `timeout_s` bounds reaching the store and every wait on it.
    """
    import torch.distributed as dist

    addr, port = launchers.rendezvous() or _no_rendezvous()
    entry = STORES.get((addr, port))
    if entry is not None:
        store, served = entry
    else:
        agent = launchers.agent_store()
        master = rank == 0 and not agent
        if not master:
            await_store_host(addr, port, timeout_s)
        store = dist.TCPStore(
            addr,
            port,
            world_size,
            is_master=master,
            wait_for_workers=False,
            timeout=timedelta(seconds=timeout_s),
        )
        served = 0
    served += 1
    STORES[(addr, port)] = (store, served)
    store.set_timeout(timedelta(seconds=timeout_s))
    # torchrun's agent store outlives a restart of the workers (--max-restarts): each attempt its keys
    attempt = launchers.restart_count() or 0
    return dist.PrefixStore(f"megatron-lifecycle/attempt-{attempt}/init-{served}", store)


def _no_rendezvous() -> tuple[str, int]:
    raise DistributedError(
        "several ranks need a rendezvous but MASTER_ADDR is not set; launch with torchrun "
        "(or `lifecycle run --nproc N`), or set MASTER_ADDR and MASTER_PORT",
        field="parallel.world_size",
    )


def megatron_kwargs(config: RunConfig) -> dict[str, Any]:
    """The arguments DISTRIBUTED gives megatron's `initialize_model_parallel` for `config`."""
    return {
        **config.parallel.megatron_sizes(),
        "create_gloo_process_groups": config.backend != "fake",
        "distributed_timeout_minutes": config.startup.timeout_s / 60,
    }


def init_parallel_state(ctx: PhaseContext, config: RunConfig) -> dict[str, int]:
    """megatron's parallel state as `parallel` sizes it, its groups created as `distributed.groups`
    says (groups.py); this rank's tp, pp, cp, ep and dp ranks."""
    from megatron.core import parallel_state as ps

    ctx.side_effect(SideEffect.PARALLEL_STATE)
    initialize_model_parallel(config.distributed.groups, **megatron_kwargs(config))
    return {
        "tp": ps.get_tensor_model_parallel_rank(),
        "pp": ps.get_pipeline_model_parallel_rank(),
        "cp": ps.get_context_parallel_rank(),
        "ep": ps.get_expert_model_parallel_rank(),
        "dp": ps.get_data_parallel_rank(),
    }


def _seed(ctx: PhaseContext, config: RunConfig, pp_rank: int) -> int:
    """Megatron's training seeding: a per-pipeline-stage seed, then the model-parallel trackers."""
    import torch
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    seed = config.training.seed + 100 * pp_rank
    ctx.side_effect(SideEffect.RNG)
    random.seed(seed)
    torch.manual_seed(seed)
    model_parallel_cuda_manual_seed(seed, force_reset_rng=True)
    return seed


def _undo(rehearsal: Closeable | None, *, barrier: AbstractContextManager[None] | None = None) -> None:
    """Destroy what this phase created (it refuses to start when anything already existed); with
    `barrier` (the watch it runs under), wait for every rank first."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    # Each step runs even when one before it raised (errors propagate, chained): a failed
    # barrier must not leave the process group, nor a failed destroy the rehearsal's patches.
    try:
        parallel_state.destroy_model_parallel()
        _drop_leftover_groups(parallel_state)
        _reset_rng_tracker()
        if dist.is_initialized() and barrier and dist.get_world_size() > 1 and dist.get_backend() != "fake":
            with barrier:
                dist.barrier()  # no rank tears its groups down while another still uses them
    finally:
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        finally:
            if rehearsal is not None:
                rehearsal.close()


def _drop_leftover_groups(parallel_state: ModuleType) -> None:
    """`destroy_model_parallel` leaves some group globals set (megatron-core 0.15 to 0.19:
    `_INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP` and its gloo twin, the list
    `_HIERARCHICAL_CONTEXT_PARALLEL_GROUPS`). A global that still holds a destroyed group keeps its
    gloo connections open, so it goes like the others (the ledger's "process group objects" probe
    finds any that stays)."""
    import torch.distributed as dist

    for name, value in list(vars(parallel_state).items()):
        held = value if isinstance(value, list) else [value]
        if any(isinstance(v, dist.ProcessGroup) for v in held):
            setattr(parallel_state, name, None)


def _reset_rng_tracker() -> None:
    """The model-parallel RNG tracker's states go with the parallel state (DISTRIBUTED seeds them)."""
    from megatron.core.tensor_parallel.random import get_cuda_rng_tracker

    get_cuda_rng_tracker().reset()


def _rehearsal(ctx: PhaseContext, config: RunConfig, cuda: bool) -> tuple[bool, str, Rehearsal | None]:
    """(rehearse?, reason, the rehearsal this phase started or None)."""
    on, reason = decide_rehearsal(config.rehearsal, cuda)
    caller_owns = is_active()  # the caller's own `cpu_rehearsal()`: use it, leave it running
    if caller_owns:
        return True, "already active (the caller's)", None
    if on:
        ctx.side_effect(SideEffect.CUDA_DEVICE)
    return on, reason, start_rehearsal() if on else None


def enter(ctx: PhaseContext) -> Runtime:
    """Rehearsal decision, process group, parallel state, RNG; log rank, world size and groups."""
    import torch
    from megatron.core.process_groups_config import ProcessGroupCollection

    config = ctx.runtime.config
    refuse_if_initialized()
    on, reason, rehearsal = _rehearsal(ctx, config, bool(torch.cuda.is_available()))
    watch: RankWatch | None = None
    groups_watch = GroupWatch().installed() if config.backend != "fake" else None  # who creates each group
    try:
        ctx.emit((records.RehearsalEnabled if on else records.RehearsalDisabled)(reason=reason))
        rank, world, watch = init_process_group(ctx, config, real_cuda=not on)
        ctx.set_rank(rank=rank, world_size=world)
        with watch.phase(ctx, "DISTRIBUTED") if watch is not None else nullcontext():
            coords = init_parallel_state(ctx, config)
            _seed(ctx, config, coords["pp"])
            groups = ProcessGroupCollection.use_mpu_process_groups()
        log_initialized(ctx, config.backend, coords)
        if groups_watch is not None:
            log_timeouts(ctx.emit, config.startup.timeout_s, groups_watch, watch_s=watch.timeout_s if watch else None)
    except BaseException:
        if watch is not None:
            watch.stop()
        if groups_watch is not None:
            groups_watch.close()
        _undo(rehearsal)
        raise
    return dataclasses.replace(
        ctx.runtime,
        distributed=True,
        rank=rank,
        world_size=world,
        backend=config.backend,
        pg_collection=groups,
        rehearsal=rehearsal,
        rank_watch=watch,
        group_watch=groups_watch,
    )


def log_initialized(ctx: PhaseContext, backend: str, coords: dict[str, int]) -> None:
    """The DISTRIBUTED_INITIALIZED record, for both phase sets: the parallel sizes (the config's; data
    parallel as megatron formed it) and this rank's place in each group (`coords`)."""
    from megatron.core import parallel_state as ps

    par = ctx.runtime.config.parallel
    dp = ps.get_data_parallel_world_size()
    ctx.emit(
        records.DistributedInitialized(
            backend=backend, tp=par.tp, pp=par.pp, cp=par.cp, ep=par.ep, dp=dp, vpp=par.vpp, ranks=coords
        )
    )


def release(ctx: PhaseContext, runtime: Runtime) -> Runtime:
    """Destroy parallel state and the process group this lifecycle created; end the rehearsal.

    The closing barrier runs under the failure broadcast (a rank that dies meanwhile does not
    leave the others in it). After a failure on any rank there is no barrier: it would wait for
    (or, worse, pair with a collective of) a rank that failed; destroying the group closes its
    sockets at once. A failed rank therefore never waits on its peers to shut down.
    """
    watch = runtime.rank_watch
    failed = watch is not None and (watch.failed or watch.peer_failure() is not None)
    barrier: AbstractContextManager[None] | None = nullcontext()
    if watch is not None:
        barrier = None if failed else watch.phase(ctx, "SHUT_DOWN")
    rehearsal = runtime.rehearsal
    if runtime.group_watch is not None:
        runtime.group_watch.close()
    try:
        if runtime.distributed:
            _undo(rehearsal, barrier=barrier)
        elif rehearsal is not None:
            rehearsal.close()
    finally:
        if watch is not None:
            watch.stop()
    return dataclasses.replace(
        runtime,
        distributed=False,
        rank=rank_of(runtime.config),  # the launcher's, as before: a restart's next failure names it
        world_size=world_size_of(runtime.config),
        backend=None,
        pg_collection=None,
        rehearsal=None,
        rank_watch=None,
        group_watch=None,
    )
