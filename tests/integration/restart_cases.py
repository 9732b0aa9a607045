"""Cases for the in-process restart tests, run on 2 spawned gloo ranks (`run_ranks`): each builds the
tiny GPT under `lifecycle.resilience.InProcessRestart`, trains 6 steps with a checkpoint at step 2,
and returns per rank the losses, a digest of the final weights, and resource counts per cycle."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import threading
from pathlib import Path
from typing import Any

from tests.integration.ports import shared_port


def config(root: str, name: str, *overrides: str) -> Any:
    from lifecycle import RunConfig

    return RunConfig.preset(
        "tiny-gpt",
        [
            "model.hidden_size=32",
            f"logging.log_dir={root}/{name}/logs",
            f"checkpoint.save={root}/{name}/ck",
            "startup.timeout_s=30",
            *overrides,
        ],
    )


def weights_digest(lc: Any) -> str:
    from megatron.core.utils import unwrap_model

    digest = hashlib.sha256()
    for chunk in unwrap_model(list(lc.runtime.model)):
        for name, param in sorted(chunk.state_dict().items()):
            if hasattr(param, "detach"):
                digest.update(name.encode())
                digest.update(param.detach().float().contiguous().numpy().tobytes())
    return digest.hexdigest()


def counts(lc: Any) -> dict[str, int]:
    """What must come back to the first cycle's values after every restart."""
    import torch.distributed as dist
    from megatron.core.utils import unwrap_model

    model = list(lc.runtime.model or ())
    chunks = unwrap_model(model)
    pre_hooks = sum(len(m._forward_pre_hooks) for c in chunks for m in c.modules())
    grad_hooks = sum(len(getattr(p, "_post_accumulate_grad_hooks", None) or {}) for c in chunks for p in c.parameters())
    groups = len(dist.distributed_c10d._world.pg_names) if dist.is_initialized() else 0
    config = lc.runtime.transformer_config
    slots = sum(getattr(config, s, None) is not None for s in ("finalize_model_grads_func", "grad_scale_func"))
    return {
        "forward_pre_hooks": pre_hooks,
        "grad_hooks": grad_hooks,
        "callbacks": slots,
        "threads": threading.active_count(),
        "fds": len(os.listdir("/proc/self/fd")),
        "process_groups": groups,
        "ledger": len(lc.ledger),
        "children": len(multiprocessing.active_children()),
    }


def worker_batches() -> Any:
    """An iterator over a DataLoader with one worker process (a dataloader worker, as training's)."""
    import torch
    from torch.utils.data import DataLoader

    # its own generator: a loader without one draws its base seed from torch's global stream, and one built
    # between a checkpoint load and the first step moves it (audit rule LA027)
    return iter(DataLoader(torch.arange(64), batch_size=4, num_workers=1, generator=torch.Generator().manual_seed(0)))


def train(fault_cycles: int, fault_step: int, steps: int = 6) -> Any:
    """`train(lc)`: steps to `steps`, saving at step 2; rank 1 raises at `fault_step` in the first
    `fault_cycles` cycles."""

    def run(lc: Any) -> dict[str, Any]:
        import torch.distributed

        from lifecycle.core_entry.train import checkpoint_step, save_after_steps, train_steps

        start = checkpoint_step(lc.runtime)
        losses: list[tuple[int, float | None]] = []
        batches = worker_batches()  # its worker must be gone when the cycle is released

        def on_step(result: Any) -> None:
            losses.append((result.step, result.loss))
            next(batches)
            if result.step == 2:
                save_after_steps(lc, 2)
            if lc.cycle < fault_cycles and result.step == fault_step:
                PER_CYCLE.append(counts(lc))
                # every rank has counted before rank 1 raises: a rank that counted after the fault
                # found its process groups already aborted by the wrapper (seen on a loaded machine)
                torch.distributed.barrier()
                if lc.runtime.rank == 1:
                    raise RuntimeError(f"injected fault at step {fault_step} in cycle {lc.cycle}")

        train_steps(lc, steps - start, on_step)
        PER_CYCLE.append(counts(lc))
        return {"losses": losses, "weights": weights_digest(lc), "start": start}

    return run


PER_CYCLE: list[dict[str, int]] = []


def run_case(root: str, name: str, fault_cycles: int, fault_step: int) -> dict[str, Any]:
    import torch

    from lifecycle.resilience import InProcessRestart

    # one intra-op thread per rank, as torchrun gives each (OMP_NUM_THREADS=1): 2 ranks of 2 threads
    # each on 2 shared cores made every step ~50x slower (OpenMP threads spinning against each other)
    torch.set_num_threads(1)
    PER_CYCLE.clear()
    port = shared_port(root, name)
    restart = InProcessRestart(config(root, name), "gpt", port=port, max_cycles=fault_cycles + 2)
    result = restart.run(train(fault_cycles, fault_step))
    return {**result, "cycles": restart.cycles, "per_cycle": list(PER_CYCLE), "log_dir": f"{root}/{name}/logs"}


def release_fails(root: str) -> dict[str, Any]:
    """Faults during restarts, each on rank 1, each restarting every rank again:
    - cycle 0: rank 1 raises at step 3 of its training;
    - cycle 1: its restart's release of SERVICES_READY raises (after releasing), once rank 0 is
      back at VALIDATED and held there: the wrapper restarts rank 0 out of cycle 1 at VALIDATED, so
      rank 0 has restarted once less than rank 1 (seen on a loaded machine, where the ranks then
      rendezvoused under different keys in every cycle until the wrapper gave up);
    - cycle 2: its SERVICES_READY raises once rank 0 waits in DISTRIBUTED's check-in for it: rank 0
      takes the wrapper's restart request there (in one wait in the store it landed only at
      `startup.timeout_s`);
    - cycle 3 resumes from the checkpoint of cycle 0 and finishes."""
    import time

    import torch

    from lifecycle.core_entry import MegatronPhases
    from lifecycle.resilience import InProcessRestart
    from states import State, Trigger

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    injected: set[str] = set()
    held = Path(root, "release", "rank 0 held at VALIDATED")
    checking_in = Path(root, "release", "rank 0 checks in in cycle 2")

    def wait_for(path: Path) -> None:
        for _ in range(6000):
            if path.exists():
                return
            time.sleep(0.01)

    def release(ctx: Any, inner: Any) -> Any:
        runtime = inner(ctx)
        if rank == 1 and ctx.trigger is Trigger.RESTART and "release" not in injected:
            injected.add("release")
            wait_for(held)
            raise RuntimeError("injected release fault in restart")
        return runtime

    def services(ctx: Any, inner: Any) -> Any:
        if rank == 1 and restart.lc.cycle == 2 and "services" not in injected:
            injected.add("services")
            wait_for(checking_in)
            time.sleep(0.5)  # rank 0 is inside the check-in's wait by now
            raise RuntimeError("injected SERVICES_READY fault in cycle 2")
        return inner(ctx)

    def distributed(ctx: Any, inner: Any) -> Any:
        if rank == 0 and restart.lc.cycle == 2:
            checking_in.touch()
        return inner(ctx)

    phases = MegatronPhases().around(State.SERVICES_READY, enter=services, release=release)
    phases = phases.around(State.DISTRIBUTED, enter=distributed)
    port = shared_port(root, "release")
    restart = InProcessRestart(config(root, "release"), "gpt", port=port, max_cycles=5, phases=phases)
    begin_cycle = restart.lc.begin_cycle

    def held_at_validated(cycle: int) -> None:
        if rank == 0 and cycle == 1 and not held.exists():  # not again in its `except`
            held.touch()
            for _ in range(6000):  # short sleeps: the wrapper's RankShouldRestart lands between them
                time.sleep(0.01)
        begin_cycle(cycle)

    restart.lc.begin_cycle = held_at_validated  # type: ignore[method-assign]
    result = restart.run(train(1, 3))
    return {**result, "cycles": restart.cycles, "log_dir": f"{root}/release/logs"}


def sabotaged(root: str, name: str) -> dict[str, Any]:
    """A plain lifecycle whose release misses one thing (`rng`: the RNG tracker is not reset;
    `model`: a reference to the model survives; `workers`: a dataloader iterator, so its worker
    process, survives; `group`: a reference to a data-parallel process group survives, as
    megatron-core's own `destroy_model_parallel` leaves one): restart() must raise ResourceLeak
    naming it."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import random as mp_random

    from lifecycle import Lifecycle, LifecycleError
    from lifecycle.testing import leaked
    from states import State

    kept: list[Any] = []
    with Lifecycle(config(root, f"sabotage-{name}"), "gpt") as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        tracker = mp_random.get_cuda_rng_tracker()  # DISTRIBUTED's seeding made a new one
        reset = tracker.reset
        if name == "rng":
            tracker.reset = lambda: None  # type: ignore[method-assign]
        elif name == "workers":
            kept.append(worker_batches())
            next(kept[-1])
        elif name == "group":
            kept.append(parallel_state.get_data_parallel_group())
        else:
            kept.append(lc.runtime.model)
        try:
            lc.restart()
            error: dict[str, Any] = {}
        except LifecycleError as exc:  # the engine re-raises the ResourceLeak, the lifecycle FAILED
            error = {
                "type": type(exc).__name__,
                "resource": getattr(exc, "resource", None),
                "state": getattr(exc, "state", None),
                "message": str(exc),
            }
        finally:
            tracker.reset = reset  # type: ignore[method-assign]
            kept.clear()
        alive = leaked(_records(lc))
    return {"error": error, "leaked": alive}


def _records(lc: Any) -> list[dict[str, Any]]:
    import orjson

    path = lc.log_path
    return [orjson.loads(line) for line in Path(path).read_bytes().splitlines()] if path else []


def storm(root: str) -> dict[str, Any]:
    """Rank 1 raises at step 1 in every cycle: the wrapper gives up after `max_cycles` (2)."""
    import torch

    from lifecycle.resilience import InProcessRestart, RestartsExhausted

    torch.set_num_threads(1)
    port = shared_port(root, "storm")
    restart = InProcessRestart(config(root, "storm"), "gpt", port=port, max_cycles=2)
    try:
        restart.run(train(99, 1))
    except RestartsExhausted as exc:
        return {"error": str(exc), "cycles": restart.cycles, "log_dir": f"{root}/storm/logs"}
    return {"error": None, "cycles": restart.cycles, "log_dir": f"{root}/storm/logs"}


def more_ranks_than_launched(root: str) -> str:
    """`min_world_size` above the launched world size (2): refused before the first cycle."""
    from lifecycle.errors import ConfigError
    from lifecycle.resilience import InProcessRestart

    port = shared_port(root, "floor")
    try:
        InProcessRestart(config(root, "floor"), "gpt", port=port, min_world_size=3).run(train(0, 1))
    except ConfigError as exc:
        return str(exc)
    return "ran"


def restart_group(root: str) -> dict[str, Any]:
    """The uninterrupted run, the run where rank 1 fails at step 3, a restart storm, five restarts in
    one process, and the two sabotaged releases."""
    out = {
        "plain": run_case(root, "plain", 0, 3),
        "restart": run_case(root, "restart", 1, 3),
    }
    if os.environ.get("RESTART_LEAKS", "1") == "1":
        out["leaks"] = run_case(root, "leaks", 5, 1)
        out["sabotage_rng"] = sabotaged(root, "rng")
        out["sabotage_model"] = sabotaged(root, "model")
        out["sabotage_workers"] = sabotaged(root, "workers")
        out["sabotage_group"] = sabotaged(root, "group")
        out["release"] = release_fails(root)
    out["storm"] = storm(root)  # after the others: they keep their order (and their ports' timing)
    out["min_world_size_3"] = more_ranks_than_launched(root)
    return out
