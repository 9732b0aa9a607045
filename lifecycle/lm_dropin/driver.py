"""`pretrain`: Megatron-LM's signature, the lifecycle's startup, Megatron-LM's `train()`."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lifecycle.engine import Lifecycle, TripwirePolicy
from lifecycle.lm_dropin.entry import (
    MegatronLMCall,
    MegatronLMPhases,
    args_from_container,
    quiet_library_loggers,
    run_config,
    run_training,
)
from lifecycle.resilience import cycle_and_store, injectable
from lifecycle.runtime import GivenProvider, Options, OptionValues
from lifecycle.runtime.frames import drop_frame_locals

if TYPE_CHECKING:
    from argparse import Namespace

    from megatron.core.enums import ModelType
    from megatron.core.pipeline_parallel.p2p_communication import P2PCommunicator
    from megatron.core.process_groups_config import MultiModuleProcessGroupCollection, ProcessGroupCollection
    from megatron.training.config.container import PretrainConfigContainer
    from nvidia_resiliency_ext.inprocess import CallWrapper
    from torch.distributed import Store

    from lifecycle.lm_dropin.entry import DatasetProvider, ForwardStep, TrainResult

LOG_DIR_ENV = "LIFECYCLE_LOG_DIR"


@injectable
def pretrain(
    cfg_container: PretrainConfigContainer,
    train_valid_test_dataset_provider: DatasetProvider,
    model_type: ModelType,
    forward_step_func: ForwardStep,
    model_provider: GivenProvider = None,
    process_non_loss_data_func: Callable[..., None] | None = None,
    get_embedding_ranks: Callable[..., list[int]] | None = None,
    get_position_embedding_ranks: Callable[..., list[int]] | None = None,
    non_loss_data_func: Callable[..., object] | None = None,
    store: Store | None = None,
    inprocess_call_wrapper: CallWrapper | None = None,
    p2p_communicator: P2PCommunicator | None = None,
    pg_collection: ProcessGroupCollection | MultiModuleProcessGroupCollection | None = None,
    skip_model_parallel_init: bool = False,
    *,
    log_dir: str | Path | None = None,
    tripwires: TripwirePolicy = "raise",
    options: Options | OptionValues | None = None,
) -> TrainResult:
    """Megatron-LM's `pretrain`, started by the lifecycle: same arguments, same training.

    The startup runs as the lifecycle's states, each doing its work with Megatron-LM's own function
    (see `lifecycle.lm_dropin.entry`); then Megatron-LM's `train()` runs as is. The lifecycle's
    RunConfig is derived from Megatron-LM's arguments (the script's `parse_and_validate_args`, or
    the container's fields when the script parsed none). The startup log goes to `log_dir`, else
    `$LIFECYCLE_LOG_DIR`. Under nvidia-resiliency-ext's `inprocess.Wrapper` the wrapper injects
    `inprocess_call_wrapper`; each call rendezvouses on `store` prefixed with its iteration, and its
    records carry that restart cycle (docs/restart.md#megatron-lms-pretrain). Returns the last
    iteration, the per-step losses, and the slots whose second binding by `train()` was dropped,
    with what Megatron-LM's `pretrain` leaves up still up (process group, parallel state, global
    args) and the lifecycle's own resources released (docs/adopting.md). A bad argument is refused
    at the call (ConfigError naming it).
    """
    given = dict(locals())
    cycle, store = cycle_and_store(inprocess_call_wrapper, store)  # a wrong one is refused before any work
    refuse_bad_arguments(given)  # at once, naming the argument: before any side effect
    quiet_library_loggers()
    call = _call(locals())  # the arguments as given, `store` as resolved for this cycle
    return _start_and_train(call, cycle, log_dir=log_dir, tripwires=tripwires, options=options)


CALLABLES = (
    "train_valid_test_dataset_provider",
    "forward_step_func",
    "process_non_loss_data_func",
    "get_embedding_ranks",
    "get_position_embedding_ranks",
    "non_loss_data_func",
)
"""`pretrain`'s arguments that are functions (the first two required, the others None or a function)."""


def refuse_bad_arguments(arguments: Mapping[str, object]) -> None:
    """Raise ConfigError naming the first argument of `pretrain` that cannot be what Megatron-LM's
    signature takes, with the fix, before any work (Megatron-LM itself fails on it 20-30 s in)."""
    from megatron.core.enums import ModelType
    from megatron.training.config.container import PretrainConfigContainer

    container = arguments["cfg_container"]
    if not isinstance(container, PretrainConfigContainer):
        old = " (Megatron-LM before 0.17 took the dataset provider first)" if callable(container) else ""
        _refuse(
            "cfg_container",
            f"expected a megatron.training PretrainConfigContainer, got {_kind(container)}{old}",
            "build it with pretrain_cfg_container_from_args(args, ...) and pass it first",
        )
    _refuse_bad_functions(arguments)
    if not isinstance(arguments["model_type"], ModelType):
        _refuse(
            "model_type",
            f"expected a megatron.core.enums.ModelType, got {_kind(arguments['model_type'])}",
            "pass ModelType.encoder_or_decoder",
        )
    _refuse_bad_store(arguments["store"])
    if not isinstance(arguments["skip_model_parallel_init"], bool):
        _refuse(
            "skip_model_parallel_init",
            f"expected True or False, got {_kind(arguments['skip_model_parallel_init'])}",
            "pass a bool",
        )
    log_dir = arguments["log_dir"]
    if log_dir is not None and not isinstance(log_dir, (str, Path)):
        _refuse("log_dir", f"expected a path, got {_kind(log_dir)}", "pass a str or pathlib.Path, or None")


def _refuse_bad_functions(arguments: Mapping[str, object]) -> None:
    """Raise ConfigError naming the first of CALLABLES that is not a function (the first two
    required, the others a function or None)."""
    for name in CALLABLES:
        value = arguments[name]
        required = name in CALLABLES[:2]
        if not callable(value) and (required or value is not None):
            _refuse(
                name, f"expected a function, got {_kind(value)}", "pass a function" + ("" if required else " or None")
            )


def _refuse_bad_store(store: object) -> None:
    """Raise ConfigError if `store` is neither None nor a torch.distributed.Store."""
    if store is not None:
        from torch.distributed import Store

        if not isinstance(store, Store):
            _refuse("store", f"expected a torch.distributed.Store, got {_kind(store)}", "pass a Store or None")


def _kind(value: object) -> str:
    """What was passed, by type (and name for a function or class), never its repr."""
    name = getattr(value, "__qualname__", None)
    return f"{type(value).__name__} {name}" if isinstance(name, str) else type(value).__name__


def _refuse(field: str, problem: str, fix: str) -> None:
    from lifecycle.errors import ConfigError

    message = f"pretrain: {field}: {problem}; {fix}"
    raise ConfigError(message, field=field, problems=[message])


def _call(arguments: Mapping[str, Any]) -> MegatronLMCall:  # Any: pretrain's locals(), each of its field's type
    """The call's record: the arguments Megatron-LM's signature names, and Megatron-LM's args."""
    args, validated = _megatron_args(arguments["cfg_container"])
    derived = ("args", "args_validated", "checkpointing_context")
    given = {f.name: arguments[f.name] for f in dataclasses.fields(MegatronLMCall) if f.name not in derived}
    return MegatronLMCall(**given, args=args, args_validated=validated)


def _start_and_train(
    call: MegatronLMCall,
    cycle: int | None,
    *,
    log_dir: str | Path | None,
    tripwires: TripwirePolicy,
    options: Options | OptionValues | None,
) -> TrainResult:
    """The lifecycle's startup to its plan's target (in restart cycle `cycle`), then `train()`."""
    where = log_dir if log_dir is not None else os.environ.get(LOG_DIR_ENV)
    config = run_config(call.args, log_dir=None if where is None else str(where))
    phases = MegatronLMPhases(call)
    with Lifecycle(config, provider=call.model_provider, phases=phases, tripwires=tripwires, options=options) as lc:
        if cycle is not None:
            lc.begin_cycle(cycle)
        lc.advance_to(lc.target)  # the plan's target, where it trains
        try:
            result = run_training(lc, call)
        except BaseException as exc:  # train()'s frames hold the model: let go before the releases
            drop_frame_locals(exc)
            raise
        phases.hand_over()  # returns as Megatron-LM's does: its process group, parallel state, globals up
        return result


def _megatron_args(cfg_container: PretrainConfigContainer) -> tuple[Namespace, bool]:
    """(Megatron-LM's arguments, validated?): the script's, or derived from the container."""
    from megatron.training import global_vars

    args = global_vars._GLOBAL_ARGS
    if args is not None:
        return args, True
    return args_from_container(cfg_container), False
