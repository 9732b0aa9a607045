"""What Megatron-LM's `megatron.training` needs on top of the CPU rehearsal to run its CUDA paths on CPU.

The rehearsal (`lifecycle.core_entry.rehearsal`) already rewrites `device="cuda"`, `Tensor.cuda` and
`Tensor.type` (so `clip_grads.py`'s `torch.cuda.FloatTensor` check passes), streams, events and
the CUDA RNG. `megatron.training` also reads:

- `torch.cuda.is_available()` (`initialize_megatron` asserts it unless `allow_no_cuda`, which
  `pretrain` never passes) and `torch.cuda.device_count()` (zero skips model-parallel init and the
  model-parallel seeds, `initialize.py`);
- `torch.cuda.set_device` and `get_device_properties` (`arguments.py` reads the architecture when
  TP > 1);
- megatron's fused functions are `torch.compile`d at import, and compiling reads the CUDA driver:
  compilation is off (`torch._dynamo.config.disable`), so they run eagerly, the same arithmetic;
  so is torch's optimizers' graph-capture check (it reads the CUDA stream);
- with `is_available()` true, torch's data loader pins memory (`--num-workers` > 0: a pinning
  thread on `torch.accelerator`'s current device): the rehearsal stands in for both, and
  `get_device_capability` says what `get_device_properties` says;
- `compile_helpers()` runs `make` for the dataset helper; the wheel ships the compiled helper and
  no Makefile, so the stand-in imports the compiled one instead.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def _compiled_helpers() -> None:
    """megatron's `compile_helpers`, for a wheel that ships the compiled helper: import it."""
    from megatron.core.datasets import helpers_cpp  # noqa: F401


def _properties(device: torch.device | str | int | None = None) -> types.SimpleNamespace:
    return types.SimpleNamespace(major=9, minor=0, name="cpu-rehearsal", total_memory=0, multi_processor_count=1)


def _zero_as(name: str) -> Callable[..., int]:
    """A memory count of no memory, its own function for each name: torch 2.15's dynamo refuses one
    function object under two names with different tracing rules."""

    def zero(*_: object, **__: object) -> int:
        return 0

    zero.__name__ = zero.__qualname__ = name
    return zero


def extra_patches() -> list[tuple[types.ModuleType | type, str, object]]:
    """(owner, attribute, stand-in) for what `megatron.training` reads beyond the rehearsal's patches."""
    import torch
    import torch._dynamo.config as dynamo_config
    from megatron.core.datasets import utils as dataset_utils

    out: list[tuple[types.ModuleType | type, str, object]] = [
        (torch.cuda, "is_available", lambda: True),
        (torch.cuda, "device_count", lambda: 1),
        (torch.cuda, "set_device", lambda device: None),
        (torch.cuda, "get_device_properties", _properties),
        (torch.cuda, "memory_allocated", _zero_as("memory_allocated")),
        (torch.cuda, "max_memory_allocated", _zero_as("max_memory_allocated")),
        (torch.cuda, "memory_reserved", _zero_as("memory_reserved")),
        (torch.cuda, "max_memory_reserved", _zero_as("max_memory_reserved")),
        (torch.cuda, "reset_peak_memory_stats", lambda *a, **k: None),
        (torch.cuda, "is_current_stream_capturing", lambda: False),
        (torch.cuda, "get_device_capability", lambda device=None: (9, 0)),
        (torch.optim.Optimizer, "_accelerator_graph_capture_health_check", lambda self: None),
        (dataset_utils, "compile_helpers", _compiled_helpers),
        (dynamo_config, "disable", True),
    ]
    return out


class Patched:
    """Attributes replaced by `install`; `restore` puts them back, newest first. Idempotent."""

    def __init__(self) -> None:
        self._saved: list[tuple[types.ModuleType | type, str, object, bool]] = []

    def install(self, patches: list[tuple[types.ModuleType | type, str, object]]) -> Patched:
        for owner, name, value in patches:
            self._saved.append((owner, name, getattr(owner, name, None), hasattr(owner, name)))
            setattr(owner, name, value)
        return self

    @property
    def installed(self) -> bool:
        """Some patch is still in place."""
        return bool(self._saved)

    def restore(self) -> None:
        while self._saved:
            owner, name, original, had = self._saved.pop()
            if had:
                setattr(owner, name, original)
            else:
                delattr(owner, name)


@contextmanager
def cuda_as_cpu() -> Iterator[None]:
    """The CPU rehearsal plus the patches above: Megatron-LM's own `pretrain` runs on CPU inside it."""
    from lifecycle.core_entry.rehearsal import start_rehearsal

    rehearsal = start_rehearsal()
    extra = Patched()
    try:
        extra.install(extra_patches())
        yield
    finally:
        try:
            extra.restore()
        finally:
            rehearsal.close()
