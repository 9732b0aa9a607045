"""The config fields `bindings` writes, and the slot names in the order they are installed."""

from __future__ import annotations

from typing import Final, Literal, Protocol

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
    with one callable per model chunk (the sync slots, for several chunks), or None. Declared
    read-only so that every config class matches whatever type it gives them (a mutable protocol
    field would have to match exactly); `bindings` writes them slot by slot with `setattr`.
    """

    @property
    def finalize_model_grads_func(self) -> object: ...
    @property
    def grad_scale_func(self) -> object: ...
    @property
    def no_sync_func(self) -> object: ...
    @property
    def grad_sync_func(self) -> object: ...
    @property
    def param_sync_func(self) -> object: ...
