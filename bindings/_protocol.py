"""The config fields `bindings` writes, the slot names in the order they are installed, and megatron's
objects as `bindings` reads them: Protocols of the attributes it touches (it imports neither torch
nor megatron)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Final, Literal, Protocol, TypeVar

T = TypeVar("T")

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


class LossScaler(Protocol):
    """What `grad_scale_func` holds: the optimizer's `scale_loss` (the loss it is given, scaled)."""

    def __call__(self, loss: T, /) -> T: ...


Sync = Callable[..., None] | Callable[[], AbstractContextManager[None]]
"""What a sync slot holds for one chunk: the DDP wrapper's `start_grad_sync` or `start_param_sync`,
or its `no_sync` (a context in which gradients are not reduced)."""
SlotValue = Callable[..., None] | LossScaler | Sync | list[Sync] | None
"""What a scheduler slot holds: megatron's `finalize_model_grads` (wrapped), the optimizer's
`scale_loss`, a sync callable for one chunk or a list of one per chunk, or nothing."""


class SchedulerConfig(Protocol):
    """The fields of megatron's `TransformerConfig` that `bind_callbacks` writes.

    Megatron's schedules read them from `get_model_config(model[0])`. Each holds a callable, a list
    with one callable per model chunk (the sync slots, for several chunks), or None. Declared
    read-only so that every config class matches whatever type it gives them (a mutable protocol
    field would have to match exactly); `bindings` writes them slot by slot with `setattr`.
    """

    @property
    def finalize_model_grads_func(self) -> SlotValue: ...
    @property
    def grad_scale_func(self) -> SlotValue: ...
    @property
    def no_sync_func(self) -> SlotValue: ...
    @property
    def grad_sync_func(self) -> SlotValue: ...
    @property
    def param_sync_func(self) -> SlotValue: ...


class Module(Protocol):
    """A torch module as `bindings` reads one (a model chunk, a wrapper of one, a submodule): its
    submodules, which `check` searches for configs set where the schedule never looks. A chunk's
    `config`, `module` (a wrapper's inner module), `ddp_config` and the DDP wrapper's sync methods
    are looked up by name, each where it may be missing."""

    def named_modules(self) -> Iterator[tuple[str, Module]]: ...


class Optimizer(Protocol):
    """megatron's optimizer as `bindings` reads it: `scale_loss`, which `grad_scale_func` holds (the
    loss it is given, scaled). A chained optimizer's `chained_optimizers` and each one's `config` are
    looked up by name."""

    def scale_loss(self, loss: T) -> T: ...


class DDPConfig(Protocol):
    """megatron's `DistributedDataParallelConfig` as the rules (`_rules.py`) read it. `align_grad_reduce`,
    a training-loop setting, is looked up by name: megatron's config does not carry it."""

    @property
    def overlap_grad_reduce(self) -> bool: ...
    @property
    def overlap_param_gather(self) -> bool: ...
    @property
    def align_param_gather(self) -> bool: ...


class ProcessGroup(Protocol):
    """A torch process group: its size, and this rank's place in it."""

    def size(self) -> int: ...
    def rank(self) -> int: ...


class ProcessGroups(Protocol):
    """megatron's `ProcessGroupCollection`: the groups its `finalize_model_grads` reads (megatron-core
    0.15 to 0.19; `embd` and `pos_embd` None where a model has no such group). `bindings` binds it to
    the finalizer and reads none of them itself."""

    @property
    def tp(self) -> ProcessGroup: ...
    @property
    def pp(self) -> ProcessGroup: ...
    @property
    def embd(self) -> ProcessGroup | None: ...
    @property
    def pos_embd(self) -> ProcessGroup | None: ...
    @property
    def dp_cp(self) -> ProcessGroup: ...
