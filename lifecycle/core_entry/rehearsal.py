"""CPU rehearsal: run megatron-core's CUDA code paths on CPU (gloo) by patching, then unpatching.

Inside `cpu_rehearsal()` (or between `start_rehearsal()` and `Rehearsal.close()`):

- a `torch.overrides.TorchFunctionMode` rewrites `device="cuda"`, `"cuda:N"`, `torch.device("cuda")`
  and bare int devices to CPU, for keyword `device=` arguments and `Tensor.to(...)`/`Tensor.new_*`;
- `Tensor.cuda()` returns the tensor itself and `Tensor.type()` reports `torch.cuda.*Tensor` names
  (megatron's optimizers check those strings);
- `torch.cuda` functions megatron calls (`current_device`, `synchronize`, streams, events, RNG
  state, `nvtx`, ...) are CPU stand-ins, and megatron's `tensor_parallel.random` CUDA RNG state
  helpers read and write the CPU generator;
- nothing a library does after taking the accelerator as present reaches the CUDA driver: every
  `torch.accelerator` function that would (the current device, its streams, memory, capability,
  synchronize) answers as the `torch.cuda` stand-ins do, `Tensor.pin_memory()` returns the tensor
  and factory functions' `pin_memory=True` is dropped (pinned memory exists only for a GPU). torch's
  `DataLoader` with workers and `pin_memory=True` asks `torch.accelerator.current_device_index()`
  and starts a pinning thread that sets the device and pins each batch: both run on CPU.

Function modes are per-thread: the device rewriting applies only on the thread that started the
rehearsal, while the attribute patches are process-wide. A rehearsal must be closed on the thread
that started it, and only one may be active per process (a second start raises RehearsalError).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING

from lifecycle.errors import RehearsalError

if TYPE_CHECKING:
    import torch

    from lifecycle.core_entry._rehearsal_cuda import CpuDeviceMode, Device

_MARK = "_lifecycle_rehearsal"


@dataclass(frozen=True, slots=True)
class _Patch:
    owner: ModuleType | type
    name: str
    original: object
    had: bool

    @property
    def target(self) -> str:
        return f"{getattr(self.owner, '__name__', type(self.owner).__name__)}.{self.name}"


@dataclass(slots=True, kw_only=True, eq=False)
class Rehearsal:
    """A CPU rehearsal: what it patched, and the thread whose devices it rewrites."""

    patched: tuple[str, ...]
    thread_id: int
    active: bool = True
    _patches: tuple[_Patch, ...] = field(default=(), repr=False)
    _mode: CpuDeviceMode | None = field(default=None, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def owner_alive(self) -> bool:
        """Whether the thread that started it still runs (its function mode ends with it)."""
        return self._thread is None or self._thread.is_alive()

    def close(self) -> None:
        """Leave the function mode and restore every patched attribute. Idempotent. From another
        thread only once the starting thread has ended (its function mode went with it)."""
        if not self.active:
            return
        if threading.get_ident() != self.thread_id and not self.owner_alive:
            _restore(self._patches)
            self.active = False
            return
        if threading.get_ident() != self.thread_id:
            raise RehearsalError(
                "a CPU rehearsal must be closed on the thread that started it "
                f"(started on {self.thread_id}, closing on {threading.get_ident()}); "
                "call close() from the starting thread",
                thread_id=self.thread_id,
            )
        _pop_mode(self._mode)
        _restore(self._patches)
        self.active = False

    def __enter__(self) -> Rehearsal:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def is_active() -> bool:
    """True while a rehearsal's patches are installed in this process."""
    import torch

    return bool(getattr(torch.Tensor.cuda, _MARK, False))


def start_rehearsal() -> Rehearsal:
    """Install every patch and enter the device-rewriting mode on this thread."""
    if is_active():
        raise RehearsalError(
            "a CPU rehearsal is already active in this process; close it before starting another "
            "(rehearsals do not nest)",
        )
    patches: list[_Patch] = []
    try:
        for owner, name, value in _replacements():
            patches.append(_Patch(owner, name, getattr(owner, name, None), hasattr(owner, name)))
            setattr(owner, name, value)
        mode = _device_mode_class()()
        mode.__enter__()
    except BaseException:
        _restore(patches)
        raise
    return Rehearsal(
        patched=tuple(p.target for p in patches),
        thread_id=threading.get_ident(),
        _patches=tuple(patches),
        _mode=mode,
        _thread=threading.current_thread(),
    )


@contextlib.contextmanager
def cpu_rehearsal() -> Iterator[Rehearsal]:
    """Context manager form of `start_rehearsal()`; every patch is undone on exit."""
    rehearsal = start_rehearsal()
    try:
        yield rehearsal
    finally:
        rehearsal.close()


def _restore(patches: Sequence[_Patch]) -> None:
    """Put every patched attribute back, newest first (deleting those that did not exist)."""
    for patch in reversed(patches):
        if patch.had:
            setattr(patch.owner, patch.name, patch.original)
        else:
            delattr(patch.owner, patch.name)


def _pop_mode(mode: CpuDeviceMode | None) -> None:
    from torch.overrides import _get_current_function_mode_stack

    stack = _get_current_function_mode_stack()
    if mode is None or not stack or stack[-1] is not mode:
        raise RehearsalError(
            "the CPU rehearsal's function mode is not the innermost one on this thread; "
            "exit function modes entered after the rehearsal before closing it",
        )
    mode.__exit__(None, None, None)


def _replacements() -> list[tuple[ModuleType | type, str, object]]:
    import torch
    from megatron.core.tensor_parallel import random as mrandom

    from lifecycle.core_entry import _rehearsal_cuda as fake

    cuda_tensor = fake.tensor_cuda
    setattr(cuda_tensor, _MARK, True)
    out: list[tuple[ModuleType | type, str, object]] = [
        (torch.Tensor, "cuda", cuda_tensor),
        (torch.Tensor, "type", fake.tensor_type_wrapper(torch.Tensor.type)),
    ]
    out += [(torch.cuda, name, value) for name, value in fake.torch_cuda_stand_ins().items()]
    if hasattr(torch, "accelerator"):  # torch >= 2.6
        out += [(torch.accelerator, name, value) for name, value in _accelerator_stand_ins().items()]
    out.append((torch.Tensor, "pin_memory", _unpinned))
    out += [
        (mrandom, "_get_cuda_rng_state", fake.get_cpu_rng_state),
        (mrandom, "_set_cuda_rng_state", fake.set_cpu_rng_state),
    ]
    return out


def _device_mode_class() -> type[CpuDeviceMode]:
    """The device-rewriting mode, also dropping factory functions' `pin_memory=True`."""
    global _UNPINNING_MODE
    if _UNPINNING_MODE is None:
        from lifecycle.core_entry import _rehearsal_cuda as fake

        class UnpinningCpuDeviceMode(fake.CpuDeviceMode):
            def __torch_function__(
                self,
                func: Callable[..., object],
                types: tuple[type, ...],
                args: tuple[object, ...] = (),
                kwargs: Mapping[str, object] | None = None,
            ) -> object:
                if kwargs and kwargs.get("pin_memory"):
                    kwargs = {**kwargs, "pin_memory": False}
                return super().__torch_function__(func, types, args, kwargs)

        _UNPINNING_MODE = UnpinningCpuDeviceMode
    return _UNPINNING_MODE


_UNPINNING_MODE: type[CpuDeviceMode] | None = None


def _unpinned(self: torch.Tensor, *_: object, **__: object) -> torch.Tensor:
    """`Tensor.pin_memory()`: pinned memory is for copies to a GPU; on CPU the tensor itself."""
    return self


def _accelerator_stand_ins() -> dict[str, object]:
    """`torch.accelerator`'s functions that reach the device, answering as the `torch.cuda` stand-ins
    do (device 0, one device when `torch.cuda.device_count` says so, no memory, nothing to wait
    for). `is_available` and `current_accelerator` are left as they are: they read no driver, and
    `is_available` follows `torch.cuda.is_available`."""
    import torch

    from lifecycle.core_entry import _rehearsal_cuda as fake

    stand_ins: dict[str, object] = {
        "current_device_index": _zero,
        "current_device_idx": _zero,
        "set_device_index": _nothing,
        "set_device_idx": _nothing,
        "device_count": lambda: torch.cuda.device_count(),
        "device_index": _device_index,
        "get_device_capability": _capability,
        "current_stream": lambda device=None, /: fake.Stream(),
        "set_stream": _nothing,
        "synchronize": _nothing,
        "empty_cache": _nothing,
        "empty_host_cache": _nothing,
        "get_memory_info": lambda device=None, /: (0, 0),
        "memory_allocated": _zero,
        "max_memory_allocated": _zero,
        "memory_reserved": _zero,
        "max_memory_reserved": _zero,
        "memory_stats": lambda device=None, /: {},
        "reset_accumulated_memory_stats": _nothing,
        "reset_peak_memory_stats": _nothing,
    }
    return fake.one_each(
        {name: value for name, value in stand_ins.items() if hasattr(torch.accelerator, name)}, "torch.accelerator"
    )


def _nothing(*_: object, **__: object) -> None:
    """A `torch.accelerator` setter, synchronize or cache release: nothing to do on CPU."""
    return None


def _zero(*_: object, **__: object) -> int:
    """A `torch.accelerator` device index or memory count: device 0, no memory."""
    return 0


@contextlib.contextmanager
def _device_index(device: Device, /) -> Iterator[None]:
    """`torch.accelerator.device_index(device)`: there is one device, nothing to switch."""
    yield None


def _capability(device: Device = None, /) -> dict[str, set[torch.dtype]]:
    """`torch.accelerator.get_device_capability()`: the dtypes the CPU rehearsal computes in."""
    import torch

    return {"supported_dtypes": {torch.float32, torch.float16, torch.bfloat16, torch.float64}}
