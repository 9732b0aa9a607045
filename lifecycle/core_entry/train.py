"""Training steps after startup: megatron's own schedule and optimizer on the lifecycle's model.

Synthetic token batches (seeded, from the resolved vocab) stand in for a dataset. The step
bookkeeping (first-step gather, watchdog, `step_completed`, final parameter sync) is
`lifecycle.core_entry.steps`, shared with hand-written loops (`with lc.step(n):`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

from lifecycle.core_entry.steps import TRAINING_STATE, Driver, steps_for
from lifecycle.core_entry.steps import StepResult as StepResult
from lifecycle.errors import InvalidTransition
from lifecycle.log import records
from lifecycle.resume.checkpoint import save_checkpoint
from lifecycle.runtime import Runtime
from states import training_state

if TYPE_CHECKING:
    import torch
    from megatron.core.transformer.module import MegatronModule

    from lifecycle.config import RunConfig

__all__ = [
    "checkpoint_step",
    "forward_step",
    "save_after_steps",
    "train_steps",
]


class DDPChunk(Protocol):
    """A training model chunk: wrapped in megatron's DistributedDataParallel."""

    def zero_grad_buffer(self) -> None: ...


def synthetic_batches(config: RunConfig, vocab: int, seed: int, skip: int = 0) -> Iterator[dict[str, torch.Tensor]]:
    """Seeded synthetic micro-batches, what `train_steps` trains on (a hand-written loop that wants
    the same numbers uses them too); `skip` drops the first ones (a run resumed from a checkpoint
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
        yield {
            "tokens": tokens[:, :-1],
            "labels": tokens[:, 1:],
            "position_ids": position_ids,
            "attention_mask": mask,
            "loss_mask": torch.ones(mbs, seq),
        }


def forward_step(
    data_iterator: Iterator[dict[str, torch.Tensor]], chunk: MegatronModule
) -> tuple[torch.Tensor, Callable[[torch.Tensor], tuple[torch.Tensor, dict[str, torch.Tensor]]]]:
    """The `forward_step_func` `train_steps` hands megatron's schedule: a GPT chunk on the next of
    `synthetic_batches`, its loss averaged over the loss mask (reported as `lm loss`)."""
    batch = next(data_iterator)
    output = chunk(batch["tokens"], batch["position_ids"], batch["attention_mask"], labels=batch["labels"])

    def loss_func(output_tensor: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        losses = output_tensor.float()
        mask = batch["loss_mask"]
        loss = (losses * mask).sum() / mask.sum()
        # clone: the schedule divides the returned loss in place by num_microbatches
        return loss, {"lm loss": loss.detach().clone()}

    return output, loss_func


def _step(
    rt: Runtime,
    model: list[DDPChunk],
    data: list[Iterator[dict[str, torch.Tensor]]],
    schedule: Callable[..., list[dict[str, torch.Tensor]]],
) -> float | None:
    """One forward/backward through megatron's schedule and one optimizer step; the mean loss."""
    config = rt.config
    for chunk in model:
        chunk.zero_grad_buffer()
    if rt.optimizer is not None:
        rt.optimizer.zero_grad()
    losses = schedule(
        forward_step_func=forward_step,
        data_iterator=data if len(model) > 1 else data[0],
        model=model,
        num_microbatches=config.training.num_microbatches,
        seq_length=config.model.seq_length,
        micro_batch_size=config.training.micro_batch_size,
        forward_only=False,
    )
    if rt.optimizer is not None:
        rt.optimizer.step()
    return float(sum(x["lm loss"] for x in losses) / len(losses)) if losses else None


def checkpoint_step(rt: Runtime) -> int:
    """The step of the checkpoint MODEL_BUILT loaded (0 for fresh weights): training continues after it."""
    return rt.checkpoint_step or 0


def _model_to_train(lc: Driver) -> list[DDPChunk]:
    """The model's chunks; InvalidTransition unless `lc` is where it trains, with a model and an optimizer."""
    rt = lc.runtime
    if lc.state is not training_state(lc.target) or rt.model is None or rt.optimizer is None:
        raise InvalidTransition(
            f"train_steps needs a lifecycle at {TRAINING_STATE} with a model and optimizer; it is "
            f"{lc.state.name}. Call lc.advance_to(State.{TRAINING_STATE}) with the training plan first.",
            state=lc.state,
            trigger="train_steps",
        )
    return [cast(DDPChunk, chunk) for chunk in rt.model]


def train_steps(
    lc: Driver,
    steps: int,
    on_step: Callable[[StepResult], None] | None = None,
    *,
    defer_first_gather: bool = True,
) -> list[StepResult]:
    """Run `steps` steps through `get_forward_backward_func()` and the lifecycle's optimizer.

    The bookkeeping is `lifecycle.core_entry.steps` (the same as `with lc.step(n):`): the first
    step's gather deferred (unless `defer_first_gather=False`), the watchdog, `step_completed`, and
    a forced parameter sync after the last step.
    """
    from megatron.core.pipeline_parallel import get_forward_backward_func

    model = _model_to_train(lc)
    rt = lc.runtime
    config = rt.config
    vocab = rt.vocab_size or config.tokenizer.vocab_size
    start = checkpoint_step(rt)
    skip = start * config.training.num_microbatches
    data = [synthetic_batches(config, vocab, config.training.seed + rt.rank, skip) for _ in model]
    book = steps_for(lc, defer_first_gather=defer_first_gather)
    schedule = get_forward_backward_func()
    results: list[StepResult] = []
    for step in range(start + 1, start + steps + 1):
        with book.watched(step):  # a failure on any rank, also after startup, ends every rank's wait
            book.begin(step)
            try:
                loss = _step(rt, model, data, schedule)
            except BaseException:
                book.abort(step)
                raise
            results.append(book.end(step, loss))
            if on_step is not None:
                on_step(results[-1])
    if results:
        book.sync_params("after_last_step")
    return results


def save_after_steps(lc: Driver, step: int) -> Path | None:
    """Save to `checkpoint.save` at `step` when the config asks for it (every rank calls it)."""
    rt = lc.runtime
    directory = rt.config.checkpoint.save
    if not directory or rt.model is None:
        return None
    steps_for(lc).sync_params("before_checkpoint_save")  # the shards this rank does not own are current
    started = time.perf_counter()
    path = save_checkpoint(directory, step, list(rt.model), rt.optimizer, rt.vocab_size)
    lc.record(records.CheckpointSaved(path=str(path), step=step, duration_s=time.perf_counter() - started))
    return path
