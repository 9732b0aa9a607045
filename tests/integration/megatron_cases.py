"""Helpers for integration tests that run real megatron-core in spawned gloo ranks.

Functions here run inside `lifecycle.launch.run_ranks` children (they must be module-level);
`PhaseCtx` is a small concrete `PhaseContext` to drive the phase functions directly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lifecycle import Options, RunConfig, Runtime
from lifecycle.log.records import Record
from lifecycle.testing import fields_written
from states import SIDE_EFFECT_OWNERS, Plan, SideEffect, Trigger

SEQ, MBS, VOCAB = 16, 2, 128


@dataclass
class PhaseCtx:
    """A PhaseContext that enforces side-effect ownership and records emitted events."""

    runtime: Runtime
    provider: Any = None
    plan: Plan = Plan.TRAINING
    trigger: Trigger = Trigger.BUILD_MODEL
    options: Options = field(default_factory=Options)
    log_dir: Path | None = None
    records: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def side_effect(self, kind: SideEffect) -> None:
        if SIDE_EFFECT_OWNERS[kind] is not self.trigger:
            raise AssertionError(f"{kind} declared under {self.trigger}")

    def emit(self, record: Record) -> None:
        self.records.append(fields_written(record))

    def set_rank(self, *, rank: int, world_size: int) -> None:
        """Nothing to do: these tests have no log file."""

    def last(self, event: str) -> dict[str, Any]:
        return [f for e, f in self.records if e == event][-1]


def run_config(*, tp: int = 1, pp: int = 1, vpp: int | None = None, **sections: Any) -> RunConfig:
    layers = 4 if vpp else 2
    data: dict[str, Any] = {
        "model": {"num_layers": layers, "hidden_size": 32, "num_attention_heads": 4, "seq_length": SEQ},
        "parallel": {"tp": tp, "pp": pp, "vpp": vpp},
        "tokenizer": {"vocab_size": VOCAB},
        "training": {"micro_batch_size": MBS},
        "optimizer": {"lr": 0.01},
    }
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return RunConfig.from_dict(data)


@contextmanager
def parallel(tp: int = 1, pp: int = 1, vpp: int | None = None) -> Iterator[None]:
    """parallel_state for one case; destroyed afterwards so the next case can differ."""
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    ps.initialize_model_parallel(
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp,
    )
    model_parallel_cuda_manual_seed(1234)
    try:
        yield
    finally:
        ps.destroy_model_parallel()


@contextmanager
def rehearsal_group() -> Iterator[None]:
    """The process group and CPU rehearsal around a rank's cases."""
    import warnings

    import torch.distributed as dist

    from lifecycle.core_entry.rehearsal import cpu_rehearsal

    warnings.simplefilter("ignore")
    dist.init_process_group("gloo")
    try:
        with cpu_rehearsal():
            yield
    finally:
        dist.destroy_process_group()


def build(run: RunConfig, provider: Any = None, plan: Plan = Plan.TRAINING) -> PhaseCtx:
    """MODEL_BUILT through the real phase; the returned ctx holds the new runtime."""
    from lifecycle.core_entry import model_built

    ctx = PhaseCtx(Runtime(config=run, vocab_size=VOCAB, distributed=True), provider, plan)
    ctx.runtime = model_built.enter(ctx)
    return ctx


def bind(ctx: PhaseCtx, **options: Any) -> PhaseCtx:
    """CALLBACKS_BOUND through the real phase, on the same ctx."""
    from lifecycle.core_entry import callbacks_bound

    ctx.trigger, ctx.options = Trigger.BIND_CALLBACKS, Options.of(options)
    ctx.runtime = callbacks_bound.enter(ctx)
    return ctx


def release_all(ctx: PhaseCtx) -> PhaseCtx:
    """What rebuild does: unbind, drop model and optimizer (keep services, process groups)."""
    from lifecycle.core_entry import callbacks_bound, model_built

    ctx.trigger = Trigger.REBUILD
    ctx.runtime = model_built.release(ctx, callbacks_bound.release(ctx, ctx.runtime))
    ctx.trigger = Trigger.BUILD_MODEL
    return ctx


def batches(n: int, seed: int = 0) -> list[dict[str, Any]]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        tokens = torch.randint(0, VOCAB, (MBS, SEQ), generator=gen)
        out.append(
            {
                "tokens": tokens,
                "labels": torch.roll(tokens, -1, 1),
                "position_ids": torch.arange(SEQ).unsqueeze(0).expand(MBS, SEQ),
            }
        )
    return out


def gpt_forward_step(data_iterator: Any, model: Any) -> tuple[Any, Any]:
    batch = next(data_iterator)
    output = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])

    def loss_func(out: Any) -> tuple[Any, dict[str, Any]]:
        loss = out.float().mean()
        return loss, {"loss": loss.detach().clone()}

    return output, loss_func


def train_step(rt: Runtime, microbatches: int, *, forward_only: bool = False) -> dict[str, Any]:
    """One step through megatron's schedule; the finalizer calls it made, and the schedule."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    model = list(rt.model or ())
    finalizer = rt.binding.watchdog.finalizer if rt.binding and rt.binding.watchdog else None
    before = 0 if finalizer is None else finalizer.calls
    for chunk in model:
        if hasattr(chunk, "zero_grad_buffer"):
            chunk.zero_grad_buffer()
    if rt.optimizer is not None:
        rt.optimizer.zero_grad()
    data = batches(microbatches)
    fwd_bwd = get_forward_backward_func()
    iterators: Any = [iter(data) for _ in model] if len(model) > 1 else iter(data)
    losses = fwd_bwd(
        forward_step_func=gpt_forward_step,
        data_iterator=iterators,
        model=model if len(model) > 1 else model[0],
        num_microbatches=microbatches,
        seq_length=SEQ,
        micro_batch_size=MBS,
        forward_only=forward_only,
    )
    ok = None
    if rt.optimizer is not None and not forward_only:
        ok, _, _ = rt.optimizer.step()
    return {
        "schedule": fwd_bwd.__name__,
        "finalizer_calls": None if finalizer is None else finalizer.calls - before,
        "losses": [float(x["loss"]) for x in losses],
        "step_ok": ok,
    }


def config_of(rt: Runtime) -> Any:
    from megatron.core.utils import get_model_config

    assert rt.model, "build the model first"
    return get_model_config(rt.model[0])


def replace_runtime(ctx: PhaseCtx, **changes: Any) -> None:
    ctx.runtime = dataclasses.replace(ctx.runtime, **changes)
