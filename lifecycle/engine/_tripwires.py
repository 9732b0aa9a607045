"""Tripwires: while a lifecycle starts up, calls that create process groups, parallel state, RNG
seeds or CUDA device bindings are caught wherever they come from (a user's provider too) and
refused unless the transition that owns them is running.

The registry below is the project's one piece of process-global state: the patched attributes and
the lifecycle that currently owns them. Disarming restores the original attributes, leaving no
trace in those modules.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import ParamSpec, Protocol, TypeVar

from states import SideEffect

# (module, attribute, kind). Only modules already imported are patched; `refresh()` picks up the
# ones imported later (the DISTRIBUTED phase imports megatron, for instance).
TARGETS: tuple[tuple[str, str, SideEffect], ...] = (
    ("torch.distributed", "init_process_group", SideEffect.PROCESS_GROUP),
    ("torch.distributed.distributed_c10d", "init_process_group", SideEffect.PROCESS_GROUP),
    ("megatron.core.parallel_state", "initialize_model_parallel", SideEffect.PARALLEL_STATE),
    ("megatron.core.mpu", "initialize_model_parallel", SideEffect.PARALLEL_STATE),
    ("torch", "manual_seed", SideEffect.RNG),
    ("torch.random", "manual_seed", SideEffect.RNG),
    ("megatron.core.tensor_parallel.random", "model_parallel_cuda_manual_seed", SideEffect.RNG),
    ("megatron.core.tensor_parallel", "model_parallel_cuda_manual_seed", SideEffect.RNG),
    ("torch.cuda", "set_device", SideEffect.CUDA_DEVICE),
)


_TARGET_MODULES = frozenset(modname for modname, _, _ in TARGETS)
Wrapped = Callable[..., object]
"""A patched torch/megatron function, or the tripwire that wraps it (arguments passed through)."""
P = ParamSpec("P")
R = TypeVar("R")


class _ImportHook(importlib.abc.MetaPathFinder):
    """Patches a target module right after it is first imported, so late imports are covered too."""

    def __init__(self) -> None:
        self.busy: set[str] = set()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _TARGET_MODULES or fullname in self.busy:
            return None
        self.busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self.busy.discard(fullname)
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_patch(module: ModuleType) -> None:
            exec_module(module)
            refresh(force=True)

        loader.exec_module = exec_then_patch  # type: ignore[method-assign]  # per-spec loader instance
        return spec


class Owner(Protocol):
    def tripwire(self, kind: SideEffect, target: str) -> None:
        """Raise (policy raise) or log (policy warn) unless `kind` is allowed right now."""


class _Registry:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.owner: weakref.ref[Owner] | None = None
        # (module name, attribute) -> (module, original, wrapper)
        self.patches: dict[tuple[str, str], tuple[ModuleType, Wrapped, Wrapped]] = {}
        self.originals: dict[int, Wrapped] = {}
        self.hook = _ImportHook()
        self.modules_seen = -1

    def current(self) -> Owner | None:
        owner: Owner | None = self.owner() if self.owner is not None else None
        return owner

    def wrapper_for(self, original: Callable[P, R], target: str, kind: SideEffect) -> Callable[P, R]:
        """A new tripwire around `original`, kept in `originals` (`patch_loaded` reuses it)."""

        @functools.wraps(original)
        def tripwire(*args: P.args, **kwargs: P.kwargs) -> R:
            owner = REGISTRY.current()
            if owner is not None:
                owner.tripwire(kind, target)
            return original(*args, **kwargs)

        tripwire.__lifecycle_tripwire__ = original  # type: ignore[attr-defined]  # marker for tests
        self.originals[id(original)] = tripwire
        return tripwire

    def patch_loaded(self) -> None:
        for modname, attr, kind in TARGETS:
            module = sys.modules.get(modname)
            if module is None or (modname, attr) in self.patches:
                continue
            original = getattr(module, attr, None)
            if original is None or hasattr(original, "__lifecycle_tripwire__"):
                continue
            known = self.originals.get(id(original))
            wrapper = known if known is not None else self.wrapper_for(original, f"{modname}.{attr}", kind)
            setattr(module, attr, wrapper)
            self.patches[(modname, attr)] = (module, original, wrapper)

    def restore(self) -> None:
        for key, (module, original, wrapper) in list(self.patches.items()):
            # Someone layered their own patch over ours (e.g. the CPU rehearsal): leave it, retry later.
            if getattr(module, key[1], None) is wrapper:
                setattr(module, key[1], original)
                del self.patches[key]
        if not self.patches:
            self.originals.clear()


REGISTRY = _Registry()


def arm(owner: Owner) -> None:
    """Make `owner` the lifecycle whose rules the tripwires enforce, and patch what is loaded."""
    with REGISTRY.lock:
        REGISTRY.owner = weakref.ref(owner)
        if REGISTRY.hook not in sys.meta_path:
            sys.meta_path.insert(0, REGISTRY.hook)
        REGISTRY.patch_loaded()
        REGISTRY.modules_seen = len(sys.modules)


def refresh(*, force: bool = False) -> None:
    """Patch target modules imported since `arm` (cheap when nothing was imported since)."""
    count = len(sys.modules)
    if count == REGISTRY.modules_seen and not force:
        return
    with REGISTRY.lock:
        if REGISTRY.current() is not None:
            REGISTRY.patch_loaded()
            REGISTRY.modules_seen = count


def disarm(owner: Owner) -> None:
    """Stop enforcing for `owner` and restore the original functions."""
    with REGISTRY.lock:
        if REGISTRY.current() is owner:
            REGISTRY.owner = None
        if REGISTRY.current() is None:
            REGISTRY.modules_seen = -1
            if REGISTRY.hook in sys.meta_path:
                sys.meta_path.remove(REGISTRY.hook)
            REGISTRY.restore()


def patched_targets() -> list[str]:
    """Dotted names currently patched (for tests and the log)."""
    with REGISTRY.lock:
        return sorted(f"{m}.{a}" for m, a in REGISTRY.patches)
