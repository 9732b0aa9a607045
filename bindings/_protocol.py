"""The config fields `bindings` writes, and the slot names in the order they are installed."""

from __future__ import annotations

from typing import Any, Final, Literal, Protocol

SLOTS: Final[tuple[str, ...]] = (
    "finalize_model_grads_func",
    "grad_scale_func",
    "no_sync_func",
    "grad_sync_func",
    "param_sync_func",
)
"""Every attribute of Megatron's `ModelParallelConfig` that the scheduler reads as a callback."""

Policy = Literal["keep", "replace"]
"""What to do when a slot already holds a different callable: keep it, or replace it.
`None` (the default) refuses with `BindingConflict`."""


class SchedulerConfig(Protocol):
    """The fields of megatron's `TransformerConfig` that `bind_callbacks` writes.

    Megatron's schedules read them from `get_model_config(model[0])`. Each holds a callable, a list
    with one callable per model chunk (the sync slots, for several chunks), or None.
    """

    finalize_model_grads_func: Any
    grad_scale_func: Any
    no_sync_func: Any
    grad_sync_func: Any
    param_sync_func: Any
