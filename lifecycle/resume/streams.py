"""Resume's window: the random streams a checkpoint load leaves, checked again at the first step.

Between MODEL_BUILT's checkpoint load and the first training step nothing should draw from a random
stream or re-seed one: a draw there makes the resumed run differ from the uninterrupted one
(Megatron-Bridge #5255, a warmup callback; #5257, a DataLoader drawing its base seed; ms-swift
#9935, re-seeding after the load). `ResumeWindow` opens after a load:

- it hashes every stream (`digests`): Python's `random`, NumPy's, torch's CPU generator, each CUDA
  device's where CUDA is initialized, and each state of megatron's model-parallel RNG tracker;
- it wraps the draw and seed entry points of those libraries (`ENTRY_POINTS`), so the first caller
  outside them is known by file and line;
- at the first step (`check`) it hashes them again, takes its wrappers off, and says which stream
  moved and who drew from it, and whether the step continues the checkpoint's (`restored_step + 1`);
- the optimizer's step counts and loss scale (`optimizer_counts`) are recorded at both ends, beside
  those the checkpoint was saved with, so a state that did not come back, or was built again after
  the load, shows (Megatron-Bridge #3832);
- where the caller knows the data position (the Megatron-LM drop-in: Megatron-LM's consumed samples
  and iteration), it is read at both ends too: the first step must start where the load left it (an
  offset applied twice, Megatron-Bridge #4565; data from sample 0, #3503 and #5987);
- the data the training loop is given (`watch_data`: the drop-in's train iterator, or what a caller
  names) is searched for its own generators and sampler positions (`lifecycle.resume._data_streams`
  says which are found and which are not); each is a stream `data:<path>` (`data:loader.generator`,
  `data:sampler.generator`, `data:dataset.rng`), hashed when given and at the first step. A torch
  generator drawn from in the window (a DataLoader iterator created after the load draws its base
  seed from the loader's), before or after it was given, is named with its caller: torch's draws pass
  it as `generator=` through the wrapped entry points. A NumPy generator on a dataset is swapped for a
  watched one of its own type until the check.

Cost: one hash of each stream's state twice (a few KiB each) and ~40 attribute swaps per resume; per
data stream found, two hashes (a torch generator's 5 KiB state, a NumPy bit generator's few hundred
bytes) and, for a NumPy one on a dataset, two attribute swaps. No store key, connection, collective or
process group, at any world size.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import time
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, NotRequired, ParamSpec, Protocol, TypedDict, TypeVar

from lifecycle.log import JSONValue, records
from lifecycle.resume._counts import optimizer_counts
from lifecycle.resume._data_streams import Data, DataGenerator, Found, Swap, find, watch
from lifecycle.runtime import Runtime

if TYPE_CHECKING:
    import numpy
    import torch
    from megatron.core.optimizer import MegatronOptimizer
    from numpy.typing import NDArray

P = ParamSpec("P")
R = TypeVar("R")

ENTRY_POINTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("python", "random", ("seed", "setstate", "random", "randint", "randrange", "choice", "choices", "shuffle",
                          "sample", "uniform", "gauss", "normalvariate", "getrandbits")),
    ("numpy", "numpy.random", ("seed", "set_state", "rand", "randn", "randint", "random", "random_sample",
                               "shuffle", "permutation", "choice", "normal", "uniform")),
    ("torch", "torch", ("manual_seed", "seed", "set_rng_state", "rand", "randn", "randint", "randperm", "normal",
                        "bernoulli", "multinomial", "rand_like", "randn_like", "randint_like")),
    ("torch", "torch.Tensor", ("uniform_", "normal_", "random_", "bernoulli_", "exponential_", "geometric_",
                               "cauchy_", "log_normal_")),
    ("torch", "torch.nn.functional", ("dropout",)),
    ("megatron", "megatron.core.tensor_parallel.random", ("model_parallel_cuda_manual_seed",)),
    ("megatron", "megatron.core.tensor_parallel", ("model_parallel_cuda_manual_seed",)),
    ("megatron", "megatron.core.tensor_parallel.random.CudaRNGStatesTracker", ("fork", "set_states", "add")),
)  # fmt: skip
"""(stream family, owner, attributes): what is wrapped while the window is open."""

_STDLIB = os.path.dirname(os.path.abspath(pickle.__file__))  # random.py is there


def _hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def digests() -> dict[str, str]:
    """A short hash of each random stream `capture` holds, by name (`python`, `numpy`, `torch`,
    `cuda:<i>`, `megatron:<tracker state>`): the streams a checkpoint saves are the ones checked."""
    state = capture()
    kind, keys, pos, has_gauss, cached = state["numpy"]
    out = {
        "python": _hash(pickle.dumps(state["python"])),
        "numpy": _hash(repr((kind, pos, has_gauss, cached)).encode() + keys.tobytes()),
        "torch": _hash(_tensor_bytes(state["torch"])),
    }
    for device, tensor in enumerate(state.get("cuda", [])):
        out[f"cuda:{device}"] = _hash(_tensor_bytes(tensor))
    for name, tensor in sorted(state["tracker"].items()):
        out[f"megatron:{name}"] = _hash(_tensor_bytes(tensor))
    return out


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    return bytes(tensor.cpu().numpy().tobytes())


def _tracker_states() -> dict[str, torch.Tensor]:
    """megatron's model-parallel RNG tracker's states by name ({} before it is seeded)."""
    try:
        from megatron.core.tensor_parallel.random import get_cuda_rng_tracker
    except ImportError:  # pragma: no cover - megatron-core is a dependency
        return {}
    states: dict[str, torch.Tensor] = get_cuda_rng_tracker().get_states()
    return states


class StreamStates(TypedDict):
    """What `capture` saves and `restore` puts back: each random stream's state on a rank."""

    python: tuple[int, tuple[int, ...], float | None]
    """`random.getstate()`: its version, the Mersenne Twister's state and the next Gaussian (None if none)."""
    numpy: tuple[str, NDArray[numpy.uint32], int, int, float]
    """`numpy.random.get_state()`, the legacy tuple: kind, keys, position, has_gauss, cached_gaussian."""
    torch: torch.Tensor
    tracker: dict[str, torch.Tensor]
    """megatron's model-parallel RNG tracker's states by name."""
    cuda: NotRequired[list[torch.Tensor]]
    """Each CUDA device's state; absent where CUDA is not initialized."""


def capture() -> StreamStates:
    """Every random stream's state on this rank, for a checkpoint: Python's, NumPy's, torch's CPU
    generator, each CUDA device's where CUDA is initialized, megatron's tracker states."""
    import random

    import numpy
    import torch

    state: StreamStates = {
        "python": random.getstate(),
        "numpy": numpy.random.get_state(),
        "torch": torch.get_rng_state(),
        "tracker": {name: value.clone() for name, value in _tracker_states().items()},
    }
    if torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore(state: StreamStates) -> None:
    """Put back every stream `capture` saved (a CUDA state only where CUDA is initialized)."""
    import random

    import numpy
    import torch

    random.setstate(state["python"])
    numpy.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_initialized():
        torch.cuda.set_rng_state_all(state["cuda"])
    tracker = state.get("tracker")
    if isinstance(tracker, dict) and tracker:
        from megatron.core.tensor_parallel.random import get_cuda_rng_tracker

        get_cuda_rng_tracker().set_states(tracker)


def family(stream: str) -> str:
    """The entry points' family of a stream name: `cuda:0` → torch, `megatron:x` → megatron."""
    head = stream.split(":", 1)[0]
    return "torch" if head == "cuda" else head


@dataclass(slots=True)
class _Patch:
    owner: ModuleType | type
    attr: str
    original: object
    wrapper: object
    own: bool  # the owner held `attr` itself (a module's function), not by inheritance (a Tensor method)


@dataclass(slots=True)
class ResumeWindow:
    """The window from a checkpoint load (`restored_step`) to the first step (see the module doc)."""

    restored_step: int
    restored: dict[str, str] = field(default_factory=dict)
    callers: dict[str, str] = field(default_factory=dict)
    checked: bool = False
    saved_optimizer: dict[str, JSONValue] | None = None
    """The optimizer counts the checkpoint was saved with (None: saved without them, or no optimizer)."""
    restored_position: dict[str, int] | None = None
    """The data position after the load (None where the caller did not say how to read it)."""
    _position: Callable[[], dict[str, int]] | None = None
    _optimizer: weakref.ref[MegatronOptimizer] | None = None  # weakly: the window must not keep a released optimizer
    _patches: list[_Patch] = field(default_factory=list)
    data: list[Found] = field(default_factory=list)
    """The data's streams `watch_data` found (`data:<path>`)."""
    data_restored: dict[str, str] = field(default_factory=dict)
    """Each data stream's hash when it was given."""
    drawn: dict[int, tuple[torch.Generator, str]] = field(default_factory=dict)
    """id → (generator, first caller) of each generator a wrapped entry point was given (`generator=`)."""
    _swaps: list[Swap] = field(default_factory=list)

    @classmethod
    def open(
        cls,
        restored_step: int,
        optimizer: MegatronOptimizer | None = None,
        saved_optimizer: dict[str, JSONValue] | None = None,
        position: Callable[[], dict[str, int]] | None = None,
    ) -> ResumeWindow:
        """`position` reads the data position (e.g. consumed samples, iteration), now and at the first step."""
        window = cls(restored_step=restored_step, restored=digests(), saved_optimizer=saved_optimizer)
        window._optimizer = weakref.ref(optimizer) if optimizer is not None else None
        window._position = position
        window.restored_position = position() if position is not None else None
        window._watch()
        return window

    def _counts(self) -> tuple[dict[str, JSONValue] | None, dict[str, JSONValue] | None]:
        """The optimizer's counts now (None without an optimizer, or a released one) and the counts the
        checkpoint was saved with (None for one saved without them)."""
        optimizer = self._optimizer() if self._optimizer is not None else None
        return (None if optimizer is None else optimizer_counts(optimizer)), self.saved_optimizer

    def restored_record(self) -> records.StreamsRestored:
        """The `streams_restored` record of this window, just opened."""
        now, saved = self._counts()
        return records.StreamsRestored(
            step=self.restored_step,
            streams=dict(self.restored),
            watched=self.watched,
            optimizer=records.UNSET if now is None else dict(now),
            saved_optimizer=records.UNSET if saved is None else dict(saved),
            position=records.UNSET if self.restored_position is None else self.restored_position,
        )

    @property
    def watched(self) -> int:
        """How many entry points are wrapped now (0 once closed)."""
        return len(self._patches)

    def _watch(self) -> None:
        for stream, owner_path, attrs in ENTRY_POINTS:
            owner = _resolve(owner_path)
            if owner is None:
                continue
            for attr in attrs:
                original = getattr(owner, attr, None)
                if callable(original):
                    own = attr in getattr(owner, "__dict__", {})
                    wrapper = _wrap(original, stream, f"{owner_path}.{attr}", self.callers, self.drawn)
                    setattr(owner, attr, wrapper)
                    self._patches.append(_Patch(owner, attr, original, wrapper, own))

    def watch_data(self, *data: Data, **named: DataGenerator) -> list[str]:
        """Hash the streams of `data` (and the generators `named`, as `data:<name>`) until the check; the
        names of those found. A NumPy generator on a dataset is watched for its caller (module doc)."""
        if self.checked:
            return []
        known = {f.key for f in self.data}
        try:
            for stream in find(*data, **named):
                if stream.key in known or stream.name in self.data_restored:
                    continue
                self.data.append(stream)
                self.data_restored[stream.name] = stream.digest()
                swap = watch(stream, self.callers, caller)
                if swap is not None:
                    self._swaps.append(swap)
        except Exception as exc:  # a user object's attribute that raises: watch what was found, train on
            warnings.warn(f"the resume window stopped looking for the data's generators: {exc!r}", stacklevel=2)
        return [f.name for f in self.data]

    def _data_moved(self) -> list[dict[str, str]]:
        """Each data stream whose hash changed since it was given, or that a torch draw was given."""
        out = []
        for stream in self.data:
            found = stream.digest()
            drawn = self.drawn.get(stream.key) if stream.torch else None
            if drawn is None and found == self.data_restored[stream.name]:
                continue
            who = drawn[1] if drawn is not None else self.callers.get(stream.name)
            out.append(
                {
                    "stream": stream.name,
                    "restored": self.data_restored[stream.name],
                    "found": found,
                    "caller": who or "unknown: not through a watched entry point",
                }
            )
        return out

    def close(self) -> None:
        """Take the wrappers off (each one still in place; one someone replaced since stays theirs)."""
        swaps, self._swaps = self._swaps, []
        for swap in reversed(swaps):
            swap.undo()
        patches, self._patches = self._patches, []
        for patch in reversed(patches):
            if _current(patch.owner, patch.attr) is not patch.wrapper:
                continue
            if patch.own:
                setattr(patch.owner, patch.attr, patch.original)
            else:
                delattr(patch.owner, patch.attr)

    def check(self, step: int) -> records.StreamsChecked | None:
        """Close the window at step `step`'s start: the `streams_checked` record; None when it was
        checked before (the first step only)."""
        if self.checked:
            return None
        started = time.perf_counter()
        self.close()
        self.checked = True
        found = digests()
        moved = [
            {
                "stream": name,
                "restored": self.restored.get(name, "absent"),
                "found": found.get(name, "absent"),
                "caller": self.callers.get(family(name), "unknown: not through a watched entry point"),
            }
            for name in sorted(set(self.restored) | set(found))
            if self.restored.get(name) != found.get(name)
        ]
        moved += self._data_moved()
        self.drawn.clear()  # the generators drawn from are not kept past the check
        read = self._position is not None and self.restored_position is not None
        now, saved = self._counts()
        return records.StreamsChecked(
            step=step,
            restored_step=self.restored_step,
            moved=moved,
            streams=len(found) + len(self.data),
            data=dict(self.data_restored) if self.data else records.UNSET,
            optimizer=records.UNSET if now is None else dict(now),
            saved_optimizer=records.UNSET if saved is None else dict(saved),
            position=self._position() if read and self._position is not None else records.UNSET,
            restored_position=self.restored_position if read and self.restored_position is not None else records.UNSET,
            duration_s=time.perf_counter() - started,
        )


class _Driven(Protocol):
    @property
    def runtime(self) -> Runtime: ...


def watch_data(lc: _Driven, *data: Data, **named: DataGenerator) -> list[str]:
    """After a checkpoint load, before the first step: hash the random streams of the data the training
    loop is given (DataLoaders, their iterators, samplers, datasets; a list is its items) and of the
    generators `named` (`data:<name>`), and check them at the first step. The names of the streams
    found; [] without a resume window (fresh weights, or after the first step)."""
    window = lc.runtime.resume_window
    if not isinstance(window, ResumeWindow):
        return []
    roots = [item for root in data for item in (root if isinstance(root, (list, tuple)) else [root])]
    return window.watch_data(*roots, **named)


def _resolve(path: str) -> ModuleType | type | None:
    """The module (or class in a module) `path` names, if it is imported or importable; else None."""
    import importlib

    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: ModuleType | type | None = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            target = getattr(target, name, None)
        return target
    return None


def _current(owner: ModuleType | type, attr: str) -> object:
    """What `owner.attr` holds itself (a class's own dict, so a method is not bound)."""
    own = getattr(owner, "__dict__", {})
    return own[attr] if attr in own else getattr(owner, attr, None)


def _wrap(
    fn: Callable[P, R],
    stream: str,
    entry: str,
    callers: dict[str, str],
    generators: dict[int, tuple[torch.Generator, str]],
) -> Callable[P, R]:
    def drawn(*args: P.args, **kwargs: P.kwargs) -> R:
        generator = kwargs.get("generator")
        if generator is not None:  # a generator of one's own is no global stream; it may be the data's
            if id(generator) not in generators:
                generators[id(generator)] = (generator, f"{caller(sys._getframe(1))} ({entry})")
        elif stream not in callers:
            callers[stream] = f"{caller(sys._getframe(1))} ({entry})"
        return fn(*args, **kwargs)

    drawn.__wrapped__ = fn  # type: ignore[attr-defined]
    return drawn


def caller(frame: FrameType | None) -> str:
    """file:line in function of the first frame outside torch, numpy, megatron's RNG and the standard
    library: the code that asked for the draw."""
    first = frame
    while frame is not None and _library(frame.f_code.co_filename):
        frame = frame.f_back
    frame = frame or first
    if frame is None:  # pragma: no cover - there is always a caller
        return "unknown"
    return f"{_short(frame.f_code.co_filename)}:{frame.f_lineno} in {frame.f_code.co_name}"


def _library(path: str) -> bool:
    parts = path.replace(os.sep, "/")
    if "/torch/" in parts or "/numpy/" in parts or parts.endswith("tensor_parallel/random.py"):
        return True
    return os.path.dirname(os.path.abspath(path)) == _STDLIB


def _short(path: str) -> str:
    try:
        relative = os.path.relpath(path)
    except ValueError:  # pragma: no cover - another drive on Windows
        return path
    return path if relative.startswith("..") else relative
