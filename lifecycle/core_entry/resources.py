"""What each state's entry work made, for the engine's ledger (lifecycle/engine/_ledger.py).

`resources(state, runtime)` names each resource `state` created, with a probe that is true once it
is gone. The probes hold weak references only: the ledger never keeps a model alive.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from lifecycle.runtime import Runtime
from lifecycle.runtime.signals import WATCH_THREAD
from states import State

if TYPE_CHECKING:
    from megatron.core.timers import Timers
    from torch.distributed import ProcessGroup
    from torch.utils.tensorboard import SummaryWriter

Probe = Callable[[], bool]

SETTLE_S: Final = 5.0
"""How long a rebuild's or restart's survivors are probed again before the ledger calls them leaks
(`MegatronPhases.settle_s`). What these probes watch can end in another thread or process after
the release returns: a dataloader worker exiting, a gloo work still unwinding from the restart
wrapper's abort with a Python callback that holds its process group. CI's five-restart test once
saw such a leak on its loaded 2-core machine, gone by the next cycle (not reproduced here in 14 runs
under load, so which resource it was is not known)."""


def resources(state: State, runtime: Runtime) -> list[tuple[str, Probe]]:
    """(name, gone) for what `state`'s entry work made, in creation order."""
    made = {
        State.SERVICES_READY: _services,
        State.DISTRIBUTED: _distributed,
        State.MODEL_BUILT: _model,
        State.CALLBACKS_BOUND: _callbacks,
    }.get(state)
    return made(runtime) if made is not None else []


def _dead(obj: object) -> Probe:
    try:
        ref = weakref.ref(obj)
    except TypeError:  # not weak-referenceable: nothing to watch
        return lambda: True
    return lambda: ref() is None


def _services(runtime: Runtime) -> list[tuple[str, Probe]]:
    out: list[tuple[str, Probe]] = []
    for name, writer in runtime.writers.items():
        out.append((f"{name} writer", _closed(writer)))
    return out


def _closed(writer: SummaryWriter | Timers) -> Probe:
    try:
        ref = weakref.ref(writer)
    except TypeError:
        return lambda: True

    def gone() -> bool:
        alive = ref()
        return alive is None or bool(getattr(alive, "closed", True))

    return gone


def _distributed(runtime: Runtime) -> list[tuple[str, Probe]]:
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel.random import get_cuda_rng_tracker

    out: list[tuple[str, Probe]] = [
        ("process group", lambda: not dist.is_initialized()),
        ("megatron parallel state", lambda: not ps.model_parallel_is_initialized()),
        ("RNG tracker states", lambda: not get_cuda_rng_tracker().get_states()),
        ("process group objects (their gloo sockets)", _groups_gone(_process_groups())),
    ]
    thread = getattr(runtime.rank_watch, "_thread", None)
    if isinstance(thread, threading.Thread):
        out.append(("rank watch thread", lambda: not thread.is_alive()))
    if runtime.rehearsal is not None:
        from lifecycle.core_entry.rehearsal import is_active

        out.append(("CPU rehearsal patches", lambda: not is_active()))
    return out


def _process_groups() -> list[ProcessGroup]:
    """Every ProcessGroup that exists now: torch's registry (the default group and each `new_group`)
    and megatron's parallel state's globals (a group can outlive torch's registry there)."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    found: dict[int, ProcessGroup] = {}
    world = getattr(dist.distributed_c10d, "_world", None)  # torch's registry (2.13 and 2.14)
    for group in list(getattr(world, "pg_map", None) or {}):
        found[id(group)] = group
    for value in vars(ps).values():
        if isinstance(value, dist.ProcessGroup):
            found[id(value)] = value
    return list(found.values())


def _groups_gone(groups: list[ProcessGroup]) -> Probe:
    """Gone when none of `groups` is alive: a destroyed group that something still references keeps
    its gloo connections open, and a peer blocked in a collective with it waits for its timeout.
    ProcessGroup is a pybind object that `gc` does not track: only a weak reference sees it."""
    refs = [weakref.ref(group) for group in groups]
    return lambda: all(ref() is None for ref in refs)


def _model(runtime: Runtime) -> list[tuple[str, Probe]]:
    out: list[tuple[str, Probe]] = []
    for index, chunk in enumerate(runtime.model or ()):
        out.append((f"model chunk {index} (DDP grad hooks, forward pre-hooks)", _dead(chunk)))
    if runtime.optimizer is not None:
        out.append(("optimizer", _dead(runtime.optimizer)))
    return out


def _callbacks(runtime: Runtime) -> list[tuple[str, Probe]]:
    report = runtime.binding
    if report is None:
        return _workers()
    ref, installed = report.target_ref, dict(report.installed_ids)

    def gone() -> bool:
        target = ref() if ref is not None else None
        return target is None or all(id(getattr(target, slot, None)) != ident for slot, ident in installed.items())

    return [("bound callbacks", gone), *_workers()]


def _workers() -> list[tuple[str, Probe]]:
    """What training at CALLBACKS_BOUND starts: dataloader workers and checkpoint writers (worker
    processes: DataLoader's, an async save's; threads: a pin-memory thread, a checkpoint writer's).
    Gone when every one started since this state was entered has ended, the restart wrapper's own
    threads excepted (its monitor thread comes back in each cycle). Thread idents can be reused."""
    import multiprocessing

    processes = {p.pid for p in multiprocessing.active_children()}
    threads = {t.ident for t in threading.enumerate()}

    def no_new_processes() -> bool:
        kept = processes | _checkpoint_results_manager()
        return all(p.pid in kept for p in multiprocessing.active_children())

    def no_new_threads() -> bool:
        return all(t.ident in threads or _wrappers(t) or t.name == WATCH_THREAD for t in threading.enumerate())

    return [
        ("dataloader and checkpoint worker threads", no_new_threads),
        ("dataloader and checkpoint worker processes", no_new_processes),
    ]


def _checkpoint_results_manager() -> set[int]:
    """The pid of megatron-core's checkpoint results queue's Manager process: started by the first
    save (`filesystem_async._get_write_results_queue`) and kept in a module global for the
    process's life, so not a cycle's."""
    import sys

    module = sys.modules.get("megatron.core.dist_checkpointing.strategies.filesystem_async")
    process = getattr(getattr(getattr(module, "_results_queue", None), "_manager", None), "_process", None)
    pid = getattr(process, "pid", None)
    return {pid} if isinstance(pid, int) else set()


def _wrappers(thread: threading.Thread) -> bool:
    """A thread of the in-process restart wrapper (nvidia-resiliency-ext), which outlives cycles. (The
    lifecycle's own signal watch, `WATCH_THREAD`, is armed while a transition runs, the release of
    a restart included, and joined when it ends: not a worker either.)"""
    target = getattr(thread, "_target", None)
    modules = (type(thread).__module__, getattr(target, "__module__", None) or "")
    return any(m.startswith("nvidia_resiliency_ext.") for m in modules)


def hook_counts(runtime: Runtime) -> dict[str, int]:
    """Hooks on the model now: forward pre-hooks, gradient hooks, bound callback slots (`--diff`
    shows a count that grows from one cycle to the next: hooks added again, not released)."""
    from megatron.core.utils import unwrap_model

    chunks = unwrap_model(list(runtime.model or ()))
    modules = [m for chunk in chunks for m in chunk.modules()]
    params = [p for chunk in chunks for p in chunk.parameters()]
    slots = ("finalize_model_grads_func", "grad_scale_func", "no_sync_func", "grad_sync_func", "param_sync_func")
    config = runtime.transformer_config
    return {
        "forward_pre_hooks": sum(len(m._forward_pre_hooks) for m in modules),
        "forward_hooks": sum(len(m._forward_hooks) for m in modules),
        "grad_hooks": sum(len(getattr(p, "_post_accumulate_grad_hooks", None) or {}) for p in params),
        "callbacks": sum(getattr(config, s, None) is not None for s in slots),
    }
