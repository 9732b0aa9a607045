"""The data's own random streams for the resume window: the generators and sampler positions reachable
from the data a training loop is given, found along a fixed list of attributes (no object graph walk).

From each object given (`find`), at most `DEPTH` wrappers are unwrapped (`WRAPPERS`: megatron's
`RerunDataIterator.iterable`; a Python generator's arguments, Megatron-LM's `cyclic_iter(loader)`),
then:

- a `torch.utils.data.DataLoader`: its `generator` (`data:loader.generator`), `sampler`, `batch_sampler`
  and `dataset`;
- a DataLoader's iterator: its index sampler (`batch_sampler`, or `sampler`) and `dataset` (it holds no
  reference to its loader: a loader's own `generator` is found from the loader only);
- a sampler or batch sampler: its `generator` (`data:sampler.generator`), the `sampler` a batch sampler
  holds, and its position, the integers among `POSITION` (megatron's `MegatronPretrainingSampler` and
  `MegatronPretrainingRandomSampler`: `consumed_samples`; a `DistributedSampler`: `seed`, `epoch`), one
  stream `data:<sampler>`;
- a dataset: each attribute of its own (`vars`, one level) that holds a `torch.Generator`, a NumPy
  `Generator` or `RandomState` (`data:dataset.<attribute>`).

Not found: a generator deeper than that (a dataset's dataset's), one held in a local variable or a
sampler iterator's frame, Python's `random.Random` instances, a dataset without `__dict__`. The caller
names those itself (`watch_data(lc, name=generator)`). A re-seed (`manual_seed`, a state set) and a position set
by assignment show by their hash, with no caller.

A NumPy generator found on a dataset is replaced there, while the window is open, by a watched one of
its own type sharing its state, so a draw through the dataset is attributed to its caller; `Swap.undo`
puts the original back. A torch generator needs no wrapper: torch's draws take it as `generator=`, through
the entry points the window wraps anyway.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TypeAlias, TypeVar, Union

if TYPE_CHECKING:
    import numpy
    import torch

NumpyGenerator: TypeAlias = Union["numpy.random.Generator", "numpy.random.RandomState"]
DataGenerator: TypeAlias = Union["torch.Generator", NumpyGenerator]
"""A generator of the data's own: torch's, NumPy's, or NumPy's legacy RandomState."""
Data = TypeVar("Data")
"""An object of the data a loop is given (a loader, an iterator, a sampler, a dataset), of the caller's
type: only read through the attributes the module doc lists."""
NumpyState: TypeAlias = Union[Mapping[str, "NumpyState"], "numpy.ndarray", int, float, str]
"""A NumPy bit generator's `state` (or a RandomState's `get_state(legacy=False)`)."""
Namespace: TypeAlias = dict[str, DataGenerator]
"""A dataset's `__dict__`, as far as it is used here: only the attribute that holds a generator."""
P = ParamSpec("P")
R = TypeVar("R")

DEPTH = 3
"""Wrappers unwrapped before a loader, an iterator, a sampler or a dataset is expected."""
WRAPPERS = ("iterable",)
"""Attributes a wrapper of an iterator keeps it in (megatron's `RerunDataIterator`)."""
POSITION = ("consumed_samples", "epoch", "seed")
"""A sampler's integer attributes that say where it is: hashed together as one stream."""
_READERS = frozenset({"bit_generator", "spawn", "get_state"})
"""A NumPy generator's public methods that do not move it: not wrapped."""


@dataclass(slots=True)
class Found:
    """One stream of the data: its name (`data:<path>`), its state's bytes, and the generator (None for a
    sampler's position) with the dataset namespace that holds it, where one does."""

    name: str
    state: Callable[[], bytes]
    generator: DataGenerator | None = None
    namespace: Namespace | None = None
    attr: str = ""

    def digest(self) -> str:
        """A short hash of the stream's state now."""
        return hashlib.blake2b(self.state(), digest_size=8).hexdigest()

    @property
    def key(self) -> int:
        """What identifies the stream: its generator, or the sampler whose position it is."""
        return id(self.generator) if self.generator is not None else id(self.state)

    @property
    def torch(self) -> bool:
        return _is_torch(self.generator)


def _generator_bytes(generator: DataGenerator) -> bytes:
    import numpy

    if isinstance(generator, numpy.random.Generator):
        return _canonical(generator.bit_generator.state)
    if isinstance(generator, numpy.random.RandomState):  # its legacy state keeps the cached Gaussian too
        return _canonical(generator.get_state(legacy=False))
    return bytes(generator.get_state().numpy().tobytes())  # a torch.Generator's (5 KiB on CPU)


def _canonical(value: NumpyState) -> bytes:
    """A NumPy bit generator's state (nested dicts of ints, strings and arrays) as bytes."""
    if isinstance(value, Mapping):
        return b"{" + b",".join(repr(k).encode() + b":" + _canonical(v) for k, v in sorted(value.items())) + b"}"
    tobytes = getattr(value, "tobytes", None)
    return bytes(tobytes()) if callable(tobytes) else repr(value).encode()


def _is_numpy(value: Data) -> bool:
    if isinstance(value, _Watched):
        return True
    kind = type(value)
    return kind.__module__.startswith("numpy.random") and kind.__name__ in {"Generator", "RandomState"}


def _is_torch(value: Data) -> bool:
    torch = sys.modules.get("torch")  # not imported: no torch generator exists
    return torch is not None and isinstance(value, torch.Generator)


def _is_generator(value: Data) -> bool:
    return _is_torch(value) or _is_numpy(value)


def _generator(name: str, generator: DataGenerator, namespace: Namespace | None = None, attr: str = "") -> Found:
    return Found(name, lambda: _generator_bytes(generator), generator, namespace, attr)


def find(*data: Data, **named: DataGenerator) -> list[Found]:
    """The data's streams (see the module doc), each generator once (the first path that reaches it);
    `named` generators are streams `data:<name>` as they are."""
    found: dict[int, Found] = {}
    many = len(data) > 1
    for index, root in enumerate(data):
        for stream in _walk(root, f"{index}." if many else ""):
            found.setdefault(stream.key, stream)
    for name, value in named.items():
        if _is_generator(value):
            stream = _generator(f"data:{name}", value)
            found.setdefault(stream.key, stream)
    return list(found.values())


def _unwrap(root: Data) -> Iterator[Data]:
    """`root`, and what its wrappers (WRAPPERS, a Python generator's arguments) hold, DEPTH deep."""
    level = [root]
    for _ in range(DEPTH + 1):
        yield from level
        nxt: list[Data] = []
        for item in level:
            nxt.extend(getattr(item, name) for name in WRAPPERS if getattr(item, name, None) is not None)
            frame = getattr(item, "gi_frame", None)
            if frame is not None:
                nxt.extend(v for v in frame.f_locals.values() if _walkable(v))
        level = nxt


def _walkable(value: Data) -> bool:
    return _loader(value) or hasattr(value, "_index_sampler") or any(hasattr(value, n) for n in WRAPPERS)


def _loader(value: Data) -> bool:
    return any(c.__name__ == "DataLoader" and c.__module__.startswith("torch.utils.data") for c in type(value).__mro__)


def _walk(root: Data, prefix: str) -> Iterator[Found]:
    for item in _unwrap(root):
        if _loader(item):
            generator = getattr(item, "generator", None)
            if generator is not None:
                yield _generator(f"data:{prefix}loader.generator", generator)
            yield from _samplers(getattr(item, "batch_sampler", None), getattr(item, "sampler", None), prefix)
            yield from _dataset(getattr(item, "dataset", None), prefix)
        elif hasattr(item, "_index_sampler"):  # a DataLoader's iterator: its batch sampler, if it batches
            index = getattr(item, "_index_sampler", None)
            if getattr(item, "_auto_collation", False):
                yield from _samplers(index, getattr(index, "sampler", None), prefix)
            else:
                yield from _samplers(None, index, prefix)
            yield from _dataset(getattr(item, "_dataset", None), prefix)


def _samplers(batch: Data | None, sampler: Data | None, prefix: str) -> Iterator[Found]:
    for role, value in (("batch_sampler", batch), ("sampler", sampler)):
        if value is None:
            continue
        generator = getattr(value, "generator", None)
        if _is_generator(generator):
            yield _generator(f"data:{prefix}{role}.generator", generator)
        if any(isinstance(getattr(value, a, None), int) for a in POSITION):
            yield Found(f"data:{prefix}{role}", _position(value))


def _position(sampler: Data) -> Callable[[], bytes]:
    return lambda: repr(tuple(getattr(sampler, a, None) for a in POSITION)).encode()


def _dataset(dataset: Data | None, prefix: str) -> Iterator[Found]:
    namespace: Namespace = getattr(dataset, "__dict__", {})
    for attr, value in sorted(namespace.items()):
        if _is_generator(value):
            yield _generator(f"data:{prefix}dataset.{attr}", value, namespace, attr)


class _Watched:
    """Marks a watched NumPy generator (the subclasses `watched` makes)."""

    _original: NumpyGenerator
    _stream: str
    _callers: dict[str, str]


_SUBCLASSES: dict[type, type] = {}


def _drawing(
    fn: Callable[Concatenate[NumpyGenerator, P], R], entry: str, caller: Callable[[FrameType | None], str]
) -> Callable[Concatenate[_Watched, P], R]:
    """`fn`, a NumPy generator's method, that first names its caller, then draws from the original."""

    def draw(self: _Watched, /, *args: P.args, **kwargs: P.kwargs) -> R:
        if self._stream not in self._callers:
            self._callers[self._stream] = f"{caller(sys._getframe(1))} ({entry})"
        return fn(self._original, *args, **kwargs)

    draw.__name__ = getattr(fn, "__name__", "draw")
    return draw


def _subclass(kind: type, caller: Callable[[FrameType | None], str]) -> type:
    """`kind` with each draw method naming its caller, then drawing from the original."""
    if kind not in _SUBCLASSES:
        names = [n for n in dir(kind) if not n.startswith("_") and n not in _READERS and callable(getattr(kind, n))]
        label = f"{kind.__module__}.{kind.__name__}"
        methods = {n: _drawing(getattr(kind, n), f"{label}.{n}", caller) for n in names}
        _SUBCLASSES[kind] = type(f"Watched{kind.__name__}", (kind, _Watched), methods)
    return _SUBCLASSES[kind]


@dataclass(slots=True)
class Swap:
    """A NumPy generator replaced on its dataset by a watched one while the window is open."""

    namespace: Namespace
    attr: str
    original: NumpyGenerator
    watched: NumpyGenerator

    def undo(self) -> None:
        """Put the original back, unless someone replaced the watched one since (theirs stays)."""
        if self.namespace.get(self.attr) is self.watched:
            self.namespace[self.attr] = self.original


def watch(stream: Found, callers: dict[str, str], caller: Callable[[FrameType | None], str]) -> Swap | None:
    """Replace a NumPy generator found on a dataset by a watched one sharing its state; None otherwise."""
    original, namespace = stream.generator, stream.namespace
    if namespace is None or original is None or _is_torch(original) or isinstance(original, _Watched):
        return None
    bits = getattr(original, "bit_generator", None) or getattr(original, "_bit_generator", None)
    watched = _subclass(type(original), caller)(bits)
    watched._original, watched._stream, watched._callers = original, stream.name, callers
    namespace[stream.attr] = watched
    return Swap(namespace, stream.attr, original, watched)
