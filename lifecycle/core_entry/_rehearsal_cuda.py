"""CPU stand-ins installed by `lifecycle.rehearsal` (imports torch: load only in a rehearsal)."""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator, Mapping
from typing import ParamSpec, TypeAlias, TypeVar

import torch
from torch.overrides import TorchFunctionMode

_POSITIONAL_DEVICE_FUNCS = frozenset({torch.Tensor.to})

Device: TypeAlias = "torch.device | str | int | None"
"""A device argument as torch takes one (torch's own `_device_t`)."""
T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")


def to_cpu_device(device: T) -> T | str:
    """`"cuda"`, `"cuda:N"`, `torch.device("cuda", N)` and bare ints become `"cpu"`; others pass."""
    if isinstance(device, bool):
        return device
    if isinstance(device, int):
        return "cpu"
    if isinstance(device, str) and device.startswith("cuda"):
        return "cpu"
    if isinstance(device, torch.device) and device.type == "cuda":
        return "cpu"
    return device


class CpuDeviceMode(TorchFunctionMode):  # type: ignore[misc]  # torch is not type-followed
    """Rewrites CUDA device arguments to CPU for every torch function called on this thread."""

    def __torch_function__(
        self,
        func: Callable[..., object],
        types: tuple[type, ...],
        args: tuple[object, ...] = (),
        kwargs: Mapping[str, object] | None = None,
    ) -> object:
        kw = dict(kwargs or {})
        if "device" in kw:
            kw["device"] = to_cpu_device(kw["device"])
        if func in _POSITIONAL_DEVICE_FUNCS and len(args) > 1:
            args = (args[0], *(to_cpu_device(a) for a in args[1:]))
        return func(*args, **kw)


def tensor_cuda(self: torch.Tensor, device: Device = None, non_blocking: bool = False, **_: object) -> torch.Tensor:
    """`Tensor.cuda()` in rehearsal: the tensor stays where it is (on CPU)."""
    return self


def tensor_type_wrapper(original: Callable[..., str | torch.Tensor]) -> Callable[..., str | torch.Tensor]:
    """`Tensor.type()` names `torch.cuda.*Tensor`; `type("torch.cuda.X")` converts on CPU."""

    def tensor_type(
        self: torch.Tensor, dtype: torch.dtype | str | None = None, non_blocking: bool = False, **kw: object
    ) -> str | torch.Tensor:
        if dtype is None:
            name = str(original(self))  # the type's name: `Tensor.type()` returns a str
            return name if name.startswith("torch.cuda.") else name.replace("torch.", "torch.cuda.", 1)
        if isinstance(dtype, str) and dtype.startswith("torch.cuda."):
            dtype = "torch." + dtype[len("torch.cuda.") :]
        return original(self, dtype, non_blocking, **kw)

    return tensor_type


class Event:
    """A `torch.cuda.Event` that is always complete."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.enable_timing = enable_timing

    def record(self, stream: Stream | None = None) -> None:
        return None

    def wait(self, stream: Stream | None = None) -> None:
        return None

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True

    def elapsed_time(self, end_event: Event) -> float:
        return 0.0


class Stream:
    """A `torch.cuda.Stream`: work on CPU is already ordered, so every method returns at once."""

    def __init__(self, device: Device = None, priority: int = 0, **_: object) -> None:
        self.device = torch.device("cpu")
        self.priority = priority

    def wait_stream(self, stream: Stream) -> None:
        return None

    def wait_event(self, event: Event) -> None:
        return None

    def record_event(self, event: Event | None = None) -> Event:
        return event if event is not None else Event()

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True


@contextlib.contextmanager
def _null_context(*_: object, **__: object) -> Iterator[None]:
    yield None


def _nothing(*_: object, **__: object) -> None:
    return None


def _cpu_get_rng_state(device: Device = "cuda") -> torch.Tensor:
    return torch.get_rng_state()


def _cpu_set_rng_state(new_state: torch.Tensor, device: Device = "cuda") -> None:
    torch.set_rng_state(new_state)


def _cpu_manual_seed(seed: int) -> None:
    torch.manual_seed(seed)


def get_cpu_rng_state(device: Device = "cuda", clone: bool = False, graph_safe: bool = False) -> torch.Tensor:
    """megatron `_get_cuda_rng_state` on the CPU generator (`get_rng_state` already copies)."""
    return torch.get_rng_state()


def set_cpu_rng_state(new_state: torch.Tensor, device: Device = -1, graph_safe: bool = False) -> None:
    """megatron `_set_cuda_rng_state` on the CPU generator."""
    torch.set_rng_state(new_state)


def one_each(stand_ins: Mapping[str, object], where: str) -> dict[str, object]:
    """`stand_ins` with each function its own object, named for what it stands in for. torch 2.15's
    dynamo gives every function reachable under torch's modules one tracing rule, and refuses one
    object reached under two names whose rules differ (`torch.accelerator.synchronize` and
    `empty_cache` both `_nothing`): "Duplicate torch object ... with different rules", raised at the
    first `torch.compile`, which megatron-core's fused kernels call when imported."""
    return {
        name: _own(f"{where}.{name}", value) if isinstance(value, types.FunctionType) else value
        for name, value in stand_ins.items()
    }


def _own(qualname: str, fn: Callable[P, R]) -> Callable[P, R]:
    def stand_in(*args: P.args, **kwargs: P.kwargs) -> R:
        return fn(*args, **kwargs)

    stand_in.__name__, stand_in.__qualname__, stand_in.__doc__ = qualname.rpartition(".")[2], qualname, fn.__doc__
    return stand_in


def torch_cuda_stand_ins() -> dict[str, object]:
    """Name → replacement for the `torch.cuda` attributes megatron-core calls on its CUDA paths."""
    nvtx = types.SimpleNamespace(
        **one_each({"range_push": _nothing, "range_pop": _nothing, "mark": _nothing, "range": _null_context}, "nvtx")
    )
    return one_each(
        {
            "current_device": lambda: 0,
            "synchronize": _nothing,
            "empty_cache": _nothing,
            "Stream": Stream,
            "Event": Event,
            "stream": _null_context,
            "device": _null_context,
            "current_stream": lambda device=None: Stream(),
            "default_stream": lambda device=None: Stream(),
            "get_rng_state": _cpu_get_rng_state,
            "set_rng_state": _cpu_set_rng_state,
            "manual_seed": _cpu_manual_seed,
            "nvtx": nvtx,
        },
        "torch.cuda",
    )
