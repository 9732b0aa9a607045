"""Training steps after startup: megatron's own schedule and optimizer on the lifecycle's model.

Synthetic token batches (seeded, from the resolved vocab) stand in for a dataset. After the first
step the binding's watchdog checks that `finalize_model_grads` ran exactly once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, cast

from lifecycle.errors import LifecycleError
from lifecycle.log import events
from lifecycle.runtime import Runtime
from states import State


class DDPChunk(Protocol):
    """A training model chunk: wrapped in megatron's DistributedDataParallel."""

    def zero_grad_buffer(self) -> None: ...


class Driver(Protocol):
    """What the training steps use of a `Lifecycle`."""

    @property
    def state(self) -> State: ...
    @property
    def runtime(self) -> Runtime: ...
    def record(self, event: str, **fields: Any) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class StepResult:
    step: int
    loss: float | None
    duration_s: float
    finalizer_calls: int | None


def _batches(config: Any, vocab: int, seed: int, skip: int = 0) -> Iterator[dict[str, Any]]:
    """Seeded synthetic micro-batches; `skip` drops the first ones (a run resumed from a checkpoint
    sees the batches an uninterrupted run would)."""
    import torch

    mbs, seq = config.training.micro_batch_size, config.model.seq_length
    gen = torch.Generator().manual_seed(seed)
    position_ids = torch.arange(seq).unsqueeze(0).expand(mbs, seq)
    mask = torch.tril(torch.ones(seq, seq, dtype=torch.bool)).logical_not().view(1, 1, seq, seq)
    for _ in range(skip):
        torch.randint(0, vocab, (mbs, seq + 1), generator=gen)
    while True:
        tokens = torch.randint(0, vocab, (mbs, seq + 1), generator=gen)
        yield {"tokens": tokens[:, :-1], "labels": tokens[:, 1:], "position_ids": position_ids,
               "attention_mask": mask, "loss_mask": torch.ones(mbs, seq)}


def _forward_step(data_iterator: Iterator[dict[str, Any]], chunk: Any) -> tuple[Any, Callable[..., Any]]:
    batch = next(data_iterator)
    output = chunk(batch["tokens"], batch["position_ids"], batch["attention_mask"], labels=batch["labels"])

    def loss_func(output_tensor: Any) -> tuple[Any, dict[str, Any]]:
        losses = output_tensor.float()
        mask = batch["loss_mask"]
        loss = (losses * mask).sum() / mask.sum()
        # clone: the schedule divides the returned loss in place by num_microbatches
        return loss, {"lm loss": loss.detach().clone()}

    return output, loss_func


def checkpoint_step(rt: Runtime) -> int:
    """The step of the checkpoint MODEL_BUILT loaded (0 for fresh weights): training continues after it."""
    step = rt.extras.get("checkpoint_step")
    return step if isinstance(step, int) else 0


def train_steps(lc: Driver, steps: int, on_step: Callable[[StepResult], None] | None = None) -> list[StepResult]:
    """Run `steps` steps through `get_forward_backward_func()` and the lifecycle's optimizer."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    rt = lc.runtime
    if lc.state is not State.CALLBACKS_BOUND or rt.model is None or rt.optimizer is None:
        raise LifecycleError(
            f"train_steps needs a lifecycle at CALLBACKS_BOUND with a model and optimizer; it is "
            f"{lc.state.name}. Call lc.advance_to(State.CALLBACKS_BOUND) with the training plan first."
        )
    config, model = rt.config, [cast(DDPChunk, chunk) for chunk in rt.model]
    vocab = rt.vocab_size or config.tokenizer.vocab_size
    start = checkpoint_step(rt)
    skip = start * config.training.num_microbatches
    data = [_batches(config, vocab, config.training.seed + rt.rank, skip) for _ in model]
    watchdog = getattr(rt.binding, "watchdog", None)
    schedule = get_forward_backward_func()
    results: list[StepResult] = []
    for step in range(start + 1, start + steps + 1):
        started = time.perf_counter()
        for chunk in model:
            chunk.zero_grad_buffer()
        rt.optimizer.zero_grad()
        losses = schedule(
            forward_step_func=_forward_step, data_iterator=data if len(model) > 1 else data[0], model=model,
            num_microbatches=config.training.num_microbatches, seq_length=config.model.seq_length,
            micro_batch_size=config.training.micro_batch_size, forward_only=False,
        )
        rt.optimizer.step()
        calls = watchdog.after_step(lc.record) if watchdog is not None else None
        loss = float(sum(x["lm loss"] for x in losses) / len(losses)) if losses else None
        result = StepResult(step=step, loss=loss, duration_s=time.perf_counter() - started, finalizer_calls=calls)
        lc.record(events.STEP_COMPLETED, step=step, loss=loss, duration_s=result.duration_s)
        results.append(result)
        if on_step is not None:
            on_step(result)
    return results
