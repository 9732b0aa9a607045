"""Gradient-sync experiment: where the callbacks are bound decides whether gradients are reduced.

Two ranks on gloo under the CPU rehearsal, megatron's real DDP, distributed Adam and schedule.
The provider deep-copies its config into the model (as Nemotron Omni does). Two bindings:

- `provider_config` (the old way): callbacks installed on the provider's config object;
- `scheduler_config` (ours): `bindings.bind_callbacks`, on `get_model_config(model[0])`.

Cases (fresh zero-initialized fp32 parameter of 512 elements, fresh distributed Adam,
`overlap_grad_reduce=False`, one step through megatron's schedule with 3 microbatches):

- `dp2` (DP=2, TP=1): local gradient +1 on DP rank 0 and -3 on DP rank 1;
- `tp2` (TP=2, DP=1): a replicated parameter, local gradient +1 on TP rank 0 and -1 on rank 1.
  It is marked for the TP reduction with megatron's sequence-parallel flag
  (`config.sequence_parallel=True`, `param.sequence_parallel=True`: `finalize_model_grads`
  all-reduces such grads with SUM over TP). `average_gradients_across_tp_domain` would use
  `ReduceOp.AVG`, which gloo does not implement.

Each microbatch's loss is `c * sum(w)`; the schedule divides it by the 3 microbatches, so each
adds `c/3` to every element's gradient and the step's local gradient is exactly `c`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypedDict

from lifecycle.log import JSONValue

if TYPE_CHECKING:
    import torch
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import MegatronOptimizer
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.module import MegatronModule

    from bindings import CountingFinalizer
    from lifecycle.config import RunConfig


class Case(TypedDict):
    """A parallel layout and each rank's local gradient (by DP rank for `tp == 1`, else by TP rank)."""

    tp: int
    coefficients: tuple[float, float]


class RankResult(TypedDict):
    """One rank's result of one (case, binding)."""

    case: str
    binding: str
    rank: int
    local_grad: float
    owned_grad: list[float]
    finalizer_calls: int
    increased: int
    decreased: int
    stayed: int
    weights: list[float]


NUMEL = 512
MICROBATCHES = 3
CASES: dict[str, Case] = {
    "dp2": {"tp": 1, "coefficients": (1.0, -3.0)},
    "tp2": {"tp": 2, "coefficients": (1.0, -1.0)},
}
BINDINGS = ("provider_config", "scheduler_config")


def _probe(config: TransformerConfig, marked: bool) -> MegatronModule:
    import torch
    from megatron.core.transformer.module import MegatronModule

    class Probe(MegatronModule):  # type: ignore[misc]  # megatron ships no types
        """One replicated fp32 parameter; forward returns `c * sum(w)`."""

        def __init__(self) -> None:
            super().__init__(config=config)
            self.weight = torch.nn.Parameter(torch.zeros(NUMEL, dtype=torch.float32))
            if marked:
                self.weight.sequence_parallel = True

        def set_input_tensor(self, tensor: torch.Tensor) -> None:
            """No pipeline stages here: nothing comes from a previous stage."""

        def forward(self, coefficient: torch.Tensor) -> torch.Tensor:
            return (self.weight * coefficient).sum()

    return Probe()


def _copying_provider(config: TransformerConfig, marked: bool) -> MegatronModule:
    import copy

    return _probe(copy.deepcopy(config), marked)


def _run_config(tp: int) -> RunConfig:
    from lifecycle.config import RunConfig

    return RunConfig.from_dict(
        {
            "parallel": {"tp": tp, "sequence_parallel": tp > 1},
            "ddp": {"use_distributed_optimizer": True, "overlap_grad_reduce": False},
            "optimizer": {"optimizer": "adam", "lr": 0.01},
        }
    )


def _provider_config(tp: int) -> TransformerConfig:
    import torch
    from megatron.core.transformer import TransformerConfig

    return TransformerConfig(
        num_layers=1,
        hidden_size=8,
        num_attention_heads=2,
        tensor_model_parallel_size=tp,
        sequence_parallel=tp > 1,
        use_cpu_initialization=True,
        params_dtype=torch.float32,
    )


def _bind(
    binding: str,
    model: list[DistributedDataParallel],
    optimizer: MegatronOptimizer,
    ddp_config: DistributedDataParallelConfig,
    provider_cfg: TransformerConfig,
) -> CountingFinalizer[..., None] | None:
    """Install the callbacks; return the counting finalizer."""
    from bindings import bind_callbacks, install, planned

    if binding == "provider_config":
        # The old, wrong binding, reproduced on purpose: same callbacks, provider's config.
        return install(provider_cfg, planned(model, optimizer, ddp_config)).finalizer
    report = bind_callbacks(model, optimizer, ddp_config, provider_config=provider_cfg)
    return report.watchdog.finalizer if report.watchdog else None


def _owned_grad(ddp: DistributedDataParallel, param: torch.nn.Parameter) -> list[float]:
    """Distinct gradient values in the slice of `param` this DP rank's optimizer owns."""
    from megatron.core import parallel_state as ps

    dp_rank, dp_size = ps.get_data_parallel_rank(), ps.get_data_parallel_world_size()
    for buffer in ddp.buffers:
        if param in buffer.param_index_map:
            start, end, bucket_id = buffer.param_index_map[param]
            bucket = buffer.buckets[bucket_id]
            shard = bucket.grad_data.numel() // dp_size
            lo = bucket.offset + dp_rank * shard
            owned = param.main_grad.view(-1)[max(lo - start, 0) : max(lo + shard - start, 0)]
            return sorted({float(v) for v in owned[: end - start]})
    return []


def _build(
    name: str, binding: str
) -> tuple[list[DistributedDataParallel], MegatronOptimizer, CountingFinalizer[..., None] | None]:
    """Copying provider, DDP, distributed Adam, callbacks bound as `binding` says."""
    from lifecycle.core_entry.model_built import (
        build_optimizer,
        megatron_ddp_config,
        prepare_chunk,
        wrap_ddp,
    )

    tp = CASES[name]["tp"]
    run = _run_config(tp)
    provider_cfg = _provider_config(tp)
    ddp_config = megatron_ddp_config(run)
    model = wrap_ddp([prepare_chunk(_copying_provider(provider_cfg, tp > 1))], ddp_config)
    optimizer = build_optimizer(run, model)
    return model, optimizer, _bind(binding, model, optimizer, ddp_config, provider_cfg)


def _step(model: list[DistributedDataParallel], optimizer: MegatronOptimizer, coefficient: torch.Tensor) -> list[float]:
    """One training step through megatron's schedule; returns the owned gradient seen."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    def forward_step(
        data_iterator: Iterator[torch.Tensor], chunk: DistributedDataParallel
    ) -> tuple[torch.Tensor, Callable[[torch.Tensor], tuple[torch.Tensor, dict[str, torch.Tensor]]]]:
        return chunk(next(data_iterator)), lambda out: (out, {"loss": out.detach()})

    for chunk in model:
        chunk.zero_grad_buffer()
    optimizer.zero_grad()
    get_forward_backward_func()(
        forward_step_func=forward_step,
        data_iterator=iter([coefficient] * MICROBATCHES),
        model=model,
        num_microbatches=MICROBATCHES,
        seq_length=1,
        micro_batch_size=1,
        forward_only=False,
    )
    owned = _owned_grad(model[0], model[0].module.weight)
    optimizer.step()
    return owned


def _one_case(name: str, binding: str) -> RankResult:
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    case = CASES[name]
    ps.initialize_model_parallel(tensor_model_parallel_size=case["tp"])
    try:
        model_parallel_cuda_manual_seed(1234)
        model, optimizer, finalizer = _build(name, binding)
        tp_rank = ps.get_tensor_model_parallel_rank()
        rank = ps.get_data_parallel_rank() if case["tp"] == 1 else tp_rank
        owned = _step(model, optimizer, torch.tensor(case["coefficients"][rank]))
        after = model[0].module.weight.detach().clone()
    finally:
        ps.destroy_model_parallel()
    return {
        "case": name,
        "binding": binding,
        "rank": torch.distributed.get_rank(),
        "local_grad": case["coefficients"][rank],
        "owned_grad": owned,
        "finalizer_calls": 0 if finalizer is None else finalizer.calls,
        "increased": int((after > 0).sum()),
        "decreased": int((after < 0).sum()),
        "stayed": int((after == 0).sum()),
        "weights": after.tolist(),
    }


def rank_main(cases: tuple[str, ...], bindings: tuple[str, ...]) -> list[RankResult]:
    """One rank's share: every (case, binding) in one process, under the CPU rehearsal."""
    import warnings

    import torch.distributed as dist

    from lifecycle.core_entry.rehearsal import cpu_rehearsal

    warnings.simplefilter("ignore")  # megatron's CPU-fallback warnings would bury the table
    dist.init_process_group("gloo")
    try:
        with cpu_rehearsal():
            out: list[RankResult] = []
            for name in cases:
                for binding in bindings:
                    out.append(_one_case(name, binding))
            return out
    finally:
        dist.destroy_process_group()


def summarize(per_rank: list[list[RankResult]]) -> list[dict[str, JSONValue]]:
    """One row per (case, binding): per-rank finalizer calls and counts, replicas identical?"""
    rows: list[dict[str, JSONValue]] = []
    for index, first in enumerate(per_rank[0]):
        ranks = [results[index] for results in per_rank]
        rows.append(
            {
                "case": first["case"],
                "binding": first["binding"],
                "finalizer_calls": [r["finalizer_calls"] for r in ranks],
                "increased": [r["increased"] for r in ranks],
                "decreased": [r["decreased"] for r in ranks],
                "stayed": [r["stayed"] for r in ranks],
                "local_grad": [r["local_grad"] for r in ranks],
                "owned_grad": [r["owned_grad"] for r in ranks],
                "replicas_identical": all(r["weights"] == ranks[0]["weights"] for r in ranks),
            }
        )
    return rows


def run(cases: tuple[str, ...] = tuple(CASES), bindings: tuple[str, ...] = BINDINGS) -> list[dict[str, JSONValue]]:
    """Run the experiment on 2 spawned gloo ranks; return the summary rows."""
    from lifecycle.launchers.local import run_ranks

    return summarize(run_ranks(rank_main, 2, tuple(cases), tuple(bindings)))
