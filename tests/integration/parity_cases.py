"""Cases for test_parity.py, run inside 2 spawned gloo ranks (lifecycle.launch.run_ranks).

Each case drives a real `Lifecycle` (CPU rehearsal, megatron-core) and returns plain data. Cases
run one after another in the same ranks, so each shuts its lifecycle down.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lifecycle import Lifecycle, RunConfig
from states import State
from tests.integration import tiny_gpt

TINY = [*tiny_gpt.TINY, "optimizer.lr=0.01"]
DIST_OPT = [
    "ddp.use_distributed_optimizer=true",
    "ddp.overlap_grad_reduce=true",
    "ddp.overlap_param_gather=true",
    "ddp.align_param_gather=true",
]
PP2_VPP2 = ["parallel.pp=2", "parallel.vpp=2", "model.num_layers=4"]
SLOTS = ("finalize_model_grads_func", "grad_scale_func", "no_sync_func", "grad_sync_func", "param_sync_func")


def _config(*overrides: str) -> RunConfig:
    return RunConfig.preset("tiny-gpt", [*TINY, *overrides])


@contextmanager
def _lifecycle(*overrides: str) -> Iterator[Lifecycle]:
    with Lifecycle(_config(*overrides), options={"keep_records": True}) as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        yield lc


def _events(lc: Lifecycle, *names: str) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in r.items() if k not in ("ts", "seq", "prev", "hash", "run_id")}
        for r in lc.records
        if r["event"] in names
    ]


def _shape(value: Any) -> Any:
    return len(value) if isinstance(value, list) else ("callable" if callable(value) else None)


def _replica_spread() -> float:
    """Largest difference between this rank's full parameters and the other data-parallel ranks'."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    flat = torch.cat([p.detach().float().flatten() for p in _model_params()])
    group = ps.get_data_parallel_group()
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size(group))]
    dist.all_gather(gathered, flat, group=group)
    return float(max((g - flat).abs().max() for g in gathered))


_CURRENT: list[Any] = []


def _model_params() -> list[Any]:
    return [p for chunk in _CURRENT for p in chunk.parameters()]


def vpp_one() -> dict[str, Any]:
    """pp=2 with vpp=1: normalized to no virtual pipeline, trains 3 steps, rebuild clears every slot."""
    from megatron.core.utils import get_model_config

    from lifecycle.core_entry.train import train_steps

    with _lifecycle("parallel.pp=2", "parallel.vpp=1", "ddp.overlap_grad_reduce=true") as lc:
        config = get_model_config(lc.runtime.model[0])
        out: dict[str, Any] = {
            "normalized": _events(lc, "config_normalized"),
            "runtime_vpp": lc.runtime.config.parallel.vpp,
            "chunks": len(lc.runtime.model),
            "bound": {s: _shape(getattr(config, s)) for s in SLOTS},
            "steps": [(r.step, r.finalizer_calls) for r in train_steps(lc, 3)],
        }
        lc.rebuild()
        out["after_rebuild"] = {s: getattr(config, s) for s in SLOTS}
        out["state"] = lc.state.name
    return out


def _flat_losses(results: list[Any]) -> list[float | None]:
    return [r.loss for r in results]


def dist_opt_train(*overrides: str, defer: bool = True) -> dict[str, Any]:
    """train_steps with the distributed optimizer and overlapped, aligned param gather."""
    from megatron.core.utils import get_model_config

    from lifecycle.core_entry.train import train_steps

    with _lifecycle(*DIST_OPT, *overrides) as lc:
        _CURRENT[:] = lc.runtime.model
        config = get_model_config(lc.runtime.model[0])
        installed = lc.runtime.binding.installed_ids.get("param_sync_func")
        results = train_steps(lc, 3, defer_first_gather=defer)
        out = {
            "losses": _flat_losses(results),
            "finalizer_calls": [r.finalizer_calls for r in results],
            "spread": _replica_spread(),
            "param_sync_restored": installed is None or id(config.param_sync_func) == installed,
            "param_sync": _shape(config.param_sync_func),
            "records": _events(
                lc, "param_gather_deferred", "param_gather_resumed", "params_synced", "config_normalized"
            ),
            "hooks": [len(c.remove_forward_pre_hook_handles) > 0 for c in lc.runtime.model],
        }
        _CURRENT.clear()
    return out


def _one_step(lc: Lifecycle, step: int) -> float | None:
    """A hand-written step: megatron's schedule and optimizer on the lifecycle's model."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    from lifecycle.core_entry import train

    rt = lc.runtime
    data = train.synthetic_batches(rt.config, rt.vocab_size or 200, 7 + rt.rank + 10 * step)
    for chunk in rt.model:
        chunk.zero_grad_buffer()
    rt.optimizer.zero_grad()
    losses = get_forward_backward_func()(
        forward_step_func=train.forward_step,
        data_iterator=data,
        model=list(rt.model),
        num_microbatches=2,
        seq_length=16,
        micro_batch_size=1,
        forward_only=False,
    )
    rt.optimizer.step()
    return float(sum(x["lm loss"] for x in losses) / len(losses)) if losses else None


def hand_loop() -> dict[str, Any]:
    """`with lc.step(n)` around a hand-written loop (DP=2, distributed optimizer, overlapped gather)."""
    with _lifecycle(*DIST_OPT) as lc:
        _CURRENT[:] = lc.runtime.model
        handles = []
        for step in (1, 2, 3):
            with lc.step(step) as handle:
                handle.loss = _one_step(lc, step)
            handles.append(handle)
        before = _replica_spread()
        synced = lc.sync_params("before_checkpoint_save")
        out = {
            "results": [(h.result.step, h.result.finalizer_calls) for h in handles if h.result],
            "spread_before_sync": before,
            "synced": synced,
            "spread_after_sync": _replica_spread(),
            "records": _events(
                lc,
                "first_step_finalized",
                "step_completed",
                "param_gather_deferred",
                "param_gather_resumed",
                "params_synced",
            ),
        }
        _CURRENT.clear()
    return out


def unbound_loop() -> dict[str, Any]:
    """The step API on a model whose callbacks were taken off: the watchdog raises after step 1."""
    from bindings import unbind_callbacks

    with _lifecycle() as lc:
        unbind_callbacks(lc.runtime.binding)
        try:
            with lc.step(1) as handle:
                handle.loss = _one_step(lc, 1)
            error = None
        except Exception as exc:  # the test asserts which one
            error = type(exc).__name__
        out = {"error": error, "records": _events(lc, "first_step_not_finalized", "step_completed")}
    return out


def failing_first_step() -> dict[str, Any]:
    """Step 1 raises with the gather deferred: hooks and param_sync_func come back, the next step
    is the first again, and after a rebuild nothing of the step bookkeeping keeps the model alive."""
    import gc
    import weakref

    from megatron.core.utils import get_model_config

    from lifecycle.core_entry.train import train_steps

    with _lifecycle(*DIST_OPT, *PP2_VPP2) as lc:
        config = get_model_config(lc.runtime.model[0])
        installed = lc.runtime.binding.installed_ids["param_sync_func"]
        try:
            with lc.step(1):
                raise RuntimeError("checkpoint load failed")
        except RuntimeError as exc:
            error = str(exc)
        out: dict[str, Any] = {
            "error": error,
            "hooks": [len(c.remove_forward_pre_hook_handles) > 0 for c in lc.runtime.model],
            "param_sync_restored": id(config.param_sync_func) == installed,
        }
        out["retry"] = [r.finalizer_calls for r in train_steps(lc, 2)]
        out["records"] = [
            r["event"]
            for r in lc.records
            if r["event"] in ("param_gather_deferred", "param_gather_resumed", "step_completed", "first_step_finalized")
        ]
        old = weakref.ref(lc.runtime.model[0])
        lc.rebuild()
        gc.collect()
        out["old_freed"] = old() is None
    return out


def run_all() -> dict[str, Any]:
    import warnings

    warnings.simplefilter("ignore")
    return {
        "vpp_one": vpp_one(),
        "vpp2_deferred": dist_opt_train(*PP2_VPP2),
        "vpp2_gather_from_step_one": dist_opt_train(*PP2_VPP2, defer=False),
        "dp2_deferred": dist_opt_train(),
        "dp2_gather_from_step_one": dist_opt_train(defer=False),
        "hand_loop": hand_loop(),
        "unbound_loop": unbound_loop(),
        "failing_first_step": failing_first_step(),
    }
