"""After CALLBACKS_BOUND: Megatron-LM's data iterators, `train()` as is, and what `pretrain` does after
it. The lifecycle only watches: each `train_step` is bracketed by the step bookkeeping
(`lifecycle.core_entry.steps`: first-step watchdog, `step_completed`), and `bound_once` keeps
`train()` from binding the callbacks a second time."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeAlias, TypedDict

from lifecycle.core_entry.steps import Driver, steps_for
from lifecycle.errors import BindingError
from lifecycle.lm_dropin.entry._bound_once import bound_once, short
from lifecycle.lm_dropin.entry._late import TRAINING, late
from lifecycle.log import records
from lifecycle.resume import watch_data

if TYPE_CHECKING:
    from argparse import Namespace

    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    from megatron.core.rerun_state_machine import RerunDataIterator

    from bindings import SchedulerConfig, SlotValue
    from lifecycle.lm_dropin.entry._call import MegatronLMCall
    from lifecycle.runtime import ModelChunk, Optimizer

    DataIterator: TypeAlias = "RerunDataIterator | list[RerunDataIterator | None] | None"
    """One of Megatron-LM's train/valid/test iterators: a `RerunDataIterator`, a list of them (one per
    validation set), or None (no such data on this rank)."""
    DataIterators: TypeAlias = "DataIterator | list[DataIterator]"
    """A `DataIterator`, or one per virtual-pipeline chunk."""


class TrainResult(TypedDict):
    """What `pretrain` returns: the last iteration, the per-step losses, and the callback slots
    whose second binding by `train()` was dropped."""

    iteration: int
    losses: list[float | None]
    second_binding_dropped: list[str]


def data_iterators(
    call: MegatronLMCall, args: Namespace, chunks: int
) -> tuple[DataIterators, DataIterators, DataIterators]:
    """Megatron-LM's train/valid/test iterators (one per virtual-pipeline chunk when it has them);
    only Megatron-LM reads them."""
    import inspect

    provider = call.train_valid_test_dataset_provider
    build_train_valid_test_data_iterators = late(TRAINING, "build_train_valid_test_data_iterators")
    if args.virtual_pipeline_model_parallel_size is None:
        train, valid, test = build_train_valid_test_data_iterators(provider)
        return train, valid, test
    if "vp_stage" not in inspect.signature(provider).parameters:
        raise TypeError("vp_stage must be a kwarg in train_valid_test_dataset_provider with virtual pipelines")
    out: tuple[list[DataIterator], list[DataIterator], list[DataIterator]] = ([], [], [])
    for stage in range(chunks):
        bound = functools.partial(provider, vp_stage=stage)
        bound.is_distributed = getattr(provider, "is_distributed", False)  # type: ignore[attr-defined]  # Megatron-LM's marker
        for kept, it in zip(out, build_train_valid_test_data_iterators(bound), strict=True):
            kept.append(it)
    return out


@contextmanager
def watched_steps(lc: Driver, first: int) -> Iterator[list[float | None]]:
    """While the block runs, each Megatron-LM `train_step` is a lifecycle step; yields the losses."""
    from megatron.training import training

    book = steps_for(lc, defer_first_gather=False)  # train() defers the first gather itself
    original = training.train_step
    losses: list[float | None] = []
    counter = iter(range(first + 1, 1 << 62))

    @functools.wraps(original)
    def train_step(*args: object, **kwargs: object) -> object:
        step = next(counter)
        book.begin(step)
        try:
            with book.watched(step):  # a failure on any rank ends every rank's wait for it
                out = original(*args, **kwargs)
        except BaseException:
            book.abort(step)
            raise
        loss = out[0].get("lm loss") if isinstance(out[0], dict) else None
        losses.append(None if loss is None else float(loss))
        book.end(step, losses[-1])
        return out

    training.train_step = train_step
    try:
        yield losses
    finally:
        training.train_step = original


def run_training(lc: Driver, call: MegatronLMCall) -> TrainResult:
    """Iterators, `train()`, the final save, validation and test, as `pretrain` does them."""
    rt, args, cfg = lc.runtime, late(TRAINING, "get_args")(), call.cfg_container
    model, optimizer = list(rt.model or ()), rt.optimizer
    scheduler, ckpt = rt.scheduler, call.checkpointing_context
    config = late(TRAINING, "get_model_config")(model[0])
    train_it, valid_it, test_it = data_iterators(call, args, len(model))
    watch_data(lc, train_it)  # after a load: the train data's own generators are checked at the first step
    iteration, flops = args.iteration, args.num_floating_point_operations_so_far
    dropped: list[str] = []
    losses: list[float | None] = []
    if not cfg.validation.skip_train and args.do_train and (args.train_iters or 0) > 0:
        args.curr_iteration = 0
        _finalizer_as_train_binds_it(lc, config)
        with (
            bound_once(config, functools.partial(_replaced, lc)) as dropped,
            watched_steps(lc, args.iteration) as losses,
        ):
            iteration, flops = _train(call, model, optimizer, scheduler, train_it, valid_it, config, ckpt)
        if cfg.checkpoint.save and iteration != 0 and iteration % cfg.checkpoint.save_interval != 0:
            late(TRAINING, "save_checkpoint_and_time")(
                iteration, model, optimizer, scheduler, flops, ckpt, train_data_iterator=train_it
            )
    _evaluate(call, args, model, iteration, valid_it, test_it, config)
    late(TRAINING, "maybe_finalize_async_save")(blocking=True, terminate=True)
    return {"iteration": iteration, "losses": losses, "second_binding_dropped": list(dropped)}


def _train(
    call: MegatronLMCall,
    model: list[ModelChunk],
    optimizer: Optimizer | None,
    scheduler: OptimizerParamScheduler | None,
    train_it: DataIterators,
    valid_it: DataIterators,
    config: SchedulerConfig | None,
    ckpt: dict[str, object],
) -> tuple[int, float]:
    """Megatron-LM's `train()`, called as `pretrain` calls it; returns (iteration, floating-point
    operations so far)."""
    iteration, flops = late(TRAINING, "train")(
        call.forward_step_func,
        model,
        optimizer,
        scheduler,
        train_it,
        valid_it,
        call.process_non_loss_data_func,
        config,
        ckpt,
        call.non_loss_data_func,
        None,
        p2p_communicator=call.p2p_communicator,
        pg_collection=call.pg_collection,
    )
    return iteration, flops


def _finalizer_as_train_binds_it(lc: Driver, config: SchedulerConfig) -> None:
    """The lifecycle's finalizer made to call what `train()` would bind when it starts: the function
    `megatron.training.training.finalize_model_grads` holds now. A script's replacement of it is
    called each step, as under Megatron-LM, and recorded (`callback_replaced`, writer `train()`)."""
    from bindings import CountingFinalizer

    bound = getattr(config, "finalize_model_grads_func", None)
    now = late(TRAINING, "finalize_model_grads")
    if not isinstance(bound, CountingFinalizer) or now is getattr(bound.fn, "func", bound.fn):
        return  # megatron's own function (the lifecycle's finalizer binds it to the model's groups)
    if not callable(now):
        raise BindingError(
            f"{TRAINING}.finalize_model_grads holds {short(now)}, which train() would bind as the gradient "
            "finalizer: set it to a function, or leave Megatron-LM's",
            state="CALLBACKS_BOUND",
        )
    was = bound.fn
    bound.fn = now
    lc.record(
        records.CallbackReplaced(
            slot="finalize_model_grads_func", was=short(was), now=short(now), writer=f"{TRAINING}:train"
        )
    )


def _replaced(lc: Driver, slot: str, was: SlotValue, now: SlotValue, writer: str) -> None:
    """A write to a callback slot during `train()` that is not `train()`'s own binding: logged."""
    lc.record(records.CallbackReplaced(slot=slot, was=short(was), now=short(now), writer=writer))


def _evaluate(
    call: MegatronLMCall,
    args: Namespace,
    model: list[ModelChunk],
    iteration: int,
    valid_it: DataIterators,
    test_it: DataIterators,
    config: SchedulerConfig | None,
) -> None:
    skip = call.cfg_container.validation.skip_train
    for on, name, it in ((args.do_valid, "validation", valid_it), (args.do_test, "test", test_it)):
        if on:
            late(TRAINING, "evaluate_and_print_results")(
                f"iteration {iteration} on {name} set",
                call.forward_step_func,
                it,
                model,
                iteration,
                call.process_non_loss_data_func,
                config,
                verbose=True,
                write_to_tensorboard=not skip,
                non_loss_data_func=call.non_loss_data_func,
                pg_collection=call.pg_collection,
                p2p_communicator=call.p2p_communicator,
            )
