"""The entry points that ask megatron where the scheduler's config is: `check`, `check_settings`,
`guard_first_step`, `guard_forward_step`. Everything they decide is in `_check.py` and `_guard.py` (public as
`check_config` and `guard_config`); megatron is imported inside the functions."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Concatenate, ParamSpec, TypeVar, cast

from bindings._check import check_config, model_chunks
from bindings._guard import FirstStepGuard, SteppingOptimizer, guard_config
from bindings._protocol import DDPConfig, Module, Optimizer, SchedulerConfig
from bindings._settings import Requested, SettingsReport, compare
from bindings._targets import settings_targets
from bindings._verdict import CheckReport
from bindings._watchdog import Emit

T = TypeVar("T")
D = TypeVar("D")
M = TypeVar("M", bound=Module)
P = ParamSpec("P")


def check(
    model: Sequence[Module],
    ddp_config: DDPConfig | None = None,
    optimizer: Optimizer | None = None,
    *,
    provider_config: SchedulerConfig | None = None,
    align_grad_reduce: bool | None = None,
) -> CheckReport:
    """Check the training callbacks on the config the scheduler reads for `model` (the chunks).

    `ddp_config` defaults to the first chunk's (megatron's `DistributedDataParallel` keeps it);
    `optimizer`, when given, must be the one `grad_scale_func` belongs to; `provider_config`, the
    config your provider was given, is searched for callbacks set where the scheduler never looks.
    `align_grad_reduce` (a training-loop setting): pass it to judge `grad_sync_func` strictly; left
    None, an empty `grad_sync_func` is read as `align_grad_reduce=False`.
    """
    from megatron.core.distributed import finalize_model_grads
    from megatron.core.utils import get_model_config

    chunks = model_chunks(model)
    return check_config(
        get_model_config(chunks[0]),
        chunks,
        ddp_config=ddp_config,
        optimizer=optimizer,
        provider_config=provider_config,
        align_grad_reduce=align_grad_reduce,
        finalizer=finalize_model_grads,
        chunk_config_ids=tuple(hex(id(get_model_config(c))) for c in chunks),
    )


def check_settings(
    model: Sequence[Module],
    requested: Requested,
    *,
    optimizer: Optimizer | None = None,
    provider_config: SchedulerConfig | None = None,
    allow: Iterable[str] = (),
) -> SettingsReport:
    """Check that what was asked for (`requested`, from `bindings.requested(...)` taken before the
    provider, DDP and the optimizer saw the configs) is what the model that trains carries: every
    chunk's `get_model_config`, every DDP wrapper's config and the optimizer's config, field by
    field, and each against its own `__post_init__`. `allow`: fields accepted knowingly."""
    from megatron.core.utils import get_model_config

    chunks = model_chunks(model)
    targets = settings_targets(chunks, get_model_config, optimizer=optimizer, provider_config=provider_config)
    return compare(requested, targets, allow)


def guard_first_step(
    model: Sequence[Module], optimizer: SteppingOptimizer | None = None, *, steps: int = 1, emit: Emit | None = None
) -> FirstStepGuard:
    """Arm a `FirstStepGuard` on `get_model_config(model[0])`, after your setup bound callbacks.

    `optimizer` defaults to the owner of the config's `grad_scale_func` (`optimizer.scale_loss`);
    without one, call `guard.after_step()` after each training step.
    """
    from megatron.core.utils import get_model_config

    return guard_config(get_model_config(model_chunks(model)[0]), optimizer, steps=steps, emit=emit)


def guard_forward_step(
    forward_step_func: Callable[Concatenate[D, M, P], T], *, steps: int = 1, emit: Emit | None = None
) -> Callable[Concatenate[D, M, P], T]:
    """Wrap a Megatron-LM `forward_step_func` so its first training call arms the guard from inside
    `train()`, after `train()` bound the callbacks: `pretrain(..., guard_forward_step(fwd))`.
    A scheduler config without `grad_scale_func` by then is refused with `BindingError`."""
    import torch
    from megatron.core.utils import get_model_config

    guards: list[FirstStepGuard] = []

    def forward_step(data_iterator: D, model: M, *args: P.args, **kwargs: P.kwargs) -> T:
        if not guards and torch.is_grad_enabled():
            config = get_model_config(model)
            guards.append(guard_config(config, steps=steps, emit=emit, require_optimizer=True))
        return forward_step_func(data_iterator, model, *args, **kwargs)

    forward_step.guard = guards  # type: ignore[attr-defined]  # the armed guard, for callers
    # data_iterator and model stay nameable as in Megatron-LM's forward_step; callers pass them by position
    return cast("Callable[Concatenate[D, M, P], T]", forward_step)
