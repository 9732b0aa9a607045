"""What each scheduler slot should hold, by slot: the one source `bind_callbacks` and `check` share.

Megatron-LM's `train()` and Megatron-Bridge's `_update_model_config_funcs` bind the same way:

- with an optimizer: `finalize_model_grads_func` (megatron's `finalize_model_grads`) and
  `grad_scale_func` (`optimizer.scale_loss`);
- with `overlap_grad_reduce`: `no_sync_func` = each chunk's `no_sync`, and, with
  `align_grad_reduce`, `grad_sync_func` = each chunk's `start_grad_sync`;
- with `overlap_param_gather` and `align_param_gather`: `param_sync_func` = each chunk's
  `start_param_sync`;
- a sync slot holds the callable itself for one chunk, a list of one per chunk for several.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, TypeVar

from bindings._errors import BindingError
from bindings._protocol import DDPConfig, Module, SlotValue, Sync

FINALIZER: Final = "finalize_model_grads"
"""The source of `finalize_model_grads_func`: megatron's function (possibly wrapped)."""
SCALE_LOSS: Final = "scale_loss"
"""The source of `grad_scale_func`: the optimizer's method."""
CHUNK_METHODS: Final[dict[str, str]] = {
    "no_sync_func": "no_sync",
    "grad_sync_func": "start_grad_sync",
    "param_sync_func": "start_param_sync",
}
"""The sync slots and the DDP chunk method each holds, one entry per chunk."""

T = TypeVar("T")


def align_grad_reduce_of(ddp_config: DDPConfig | None, override: bool | None = None) -> bool:
    """`align_grad_reduce` is a training-loop setting, not a field of megatron's DDP config."""
    if override is not None:
        return override
    return bool(getattr(ddp_config, "align_grad_reduce", True))


def flag(ddp_config: DDPConfig | None, name: str) -> bool:
    """A DDP setting, False where the config (or a missing config) lacks it."""
    return bool(getattr(ddp_config, name, False))


def sources(ddp_config: DDPConfig | None, *, optimizer: bool, align_grad_reduce: bool | None = None) -> dict[str, str]:
    """The slots this DDP config asks for, in `SLOTS` order, each with its source: `FINALIZER`,
    `SCALE_LOSS`, or the name of the chunk method the slot holds per chunk."""
    wanted: dict[str, str] = {}
    if optimizer:
        wanted["finalize_model_grads_func"] = FINALIZER
        wanted["grad_scale_func"] = SCALE_LOSS
    if flag(ddp_config, "overlap_grad_reduce"):
        wanted["no_sync_func"] = CHUNK_METHODS["no_sync_func"]
        if align_grad_reduce_of(ddp_config, align_grad_reduce):
            wanted["grad_sync_func"] = CHUNK_METHODS["grad_sync_func"]
    if flag(ddp_config, "overlap_param_gather") and flag(ddp_config, "align_param_gather"):
        wanted["param_sync_func"] = CHUNK_METHODS["param_sync_func"]
    return wanted


def per_chunk(callables: Sequence[T]) -> T | list[T]:
    """Megatron's sync-slot convention: the callable itself for one chunk, a list for several."""
    if not callables:
        raise BindingError("a model has at least one chunk; got an empty list", chunks=0)
    return callables[0] if len(callables) == 1 else list(callables)


def chunk_entries(chunks: Sequence[Module], method: str) -> Sync | list[Sync]:
    """What a sync slot holds for these chunks: `per_chunk` of each chunk's `method`."""
    return per_chunk([getattr(chunk, method) for chunk in chunks])


def same(current: SlotValue, new: SlotValue) -> bool:
    """Whether a slot's value is the one planned: the same object, an equal bound method, or a
    list of such, entry by entry."""
    if isinstance(current, list) and isinstance(new, list):
        return len(current) == len(new) and all(a == b for a, b in zip(current, new, strict=True))
    return bool(current is new or current == new)
