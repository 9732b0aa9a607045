"""Megatron-LM's `train()` binds the scheduler callbacks itself; after CALLBACKS_BOUND it must not
bind them a second time. `bound_once(config)` makes that so while `train()` runs, without editing
`train()`: the model's TransformerConfig gets a subclass that looks at each write to a callback
slot made by Megatron-LM's training module (`train()`, `train_step`). Such a write that would put
back what the slot already holds (a second binding) is dropped and recorded; one of a *different*
callable is refused (the lifecycle bound something other than what Megatron-LM would); `None` and
restoring writes (train_step's pause of `param_sync_func`) go through. `train()`'s own check that
`no_sync_func` is unbound sees None, and its one-element list for one chunk reads back as written,
until its binding write has been dropped.

Every other write (a script, a profiler or a straggler detector wrapping
`config.finalize_model_grads_func` during `train()`) goes through exactly as under Megatron-LM,
and is reported to `replaced(slot, was, now, writer)` for the log. When `train()` raises, each slot
such a write still holds gets back what it replaced, so that CALLBACKS_BOUND's release unbinds the
lifecycle's callback there too (a wrapper left in a config the script keeps would hold it, and
through it the process groups the release destroys).
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from lifecycle.errors import BindingError

if TYPE_CHECKING:
    from megatron.core.transformer import TransformerConfig

    from bindings import SlotValue

SLOTS = ("finalize_model_grads_func", "grad_scale_func", "no_sync_func", "grad_sync_func", "param_sync_func")
TRAINING = "megatron.training.training"
"""The module whose writes are `train()`'s own binding (`train`, `train_step`)."""

Replaced = Callable[[str, "SlotValue", "SlotValue", str], None]
"""`replaced(slot, what was there, what replaced it, the writer as module:function)`."""


def same(a: SlotValue, b: SlotValue) -> bool:
    """Two slot values bind the same callables (bound methods compare by owner and function)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a is b or (a is not None and b is not None and a == b)


def _nothing(slot: str, was: SlotValue, now: SlotValue, writer: str) -> None:
    return None


@dataclass(slots=True, eq=False)
class _Watch:
    """What `bound_once` keeps while the block runs, shared by the subclass's methods."""

    base: Any  # Any: megatron's config class, whose unbound methods are called with `self`
    replaced: Replaced
    views: dict[str, SlotValue]
    """What train() reads back of a slot it is still writing: unbound (None) for its check that
    no_sync_func is unset, then its own one-element list until it writes the single callable."""
    dropped: list[str] = field(default_factory=list)
    foreign: dict[str, SlotValue] = field(default_factory=dict)  # slot -> what the first write not train()'s replaced
    foreign_now: dict[str, SlotValue] = field(default_factory=dict)  # slot -> what the last such write put there


@contextmanager
def bound_once(config: TransformerConfig, replaced: Replaced = _nothing) -> Iterator[list[str]]:
    """While the block runs, `config`'s callback slots take no second binding from Megatron-LM's
    training module; yields the slots whose second binding was dropped, in order. Writes by anyone
    else go through, each reported to `replaced`."""
    views: dict[str, SlotValue] = {"no_sync_func": None} if getattr(config, "no_sync_func", None) is not None else {}
    w = _Watch(base=type(config), replaced=replaced, views=views)

    def __getattribute__(self: TransformerConfig, name: str) -> object:
        if name in w.views:
            return w.views[name]
        return w.base.__getattribute__(self, name)

    namespace: dict[str, object] = {"__setattr__": _slot_setattr(w), "__module__": w.base.__module__}
    if any(getattr(config, s, None) is not None for s in SLOTS[2:]):  # only then can train() read them back
        namespace["__getattribute__"] = __getattribute__
    config.__class__ = type(w.base.__name__, (w.base,), namespace)
    try:
        yield w.dropped
    except BaseException:
        for name, was in w.foreign.items():
            if w.base.__getattribute__(config, name) is w.foreign_now[name]:
                w.base.__setattr__(config, name, was)
        raise
    finally:
        object.__setattr__(config, "__class__", w.base)
        w.foreign.clear()
        w.foreign_now.clear()


def _slot_setattr(w: _Watch) -> Callable[[TransformerConfig, str, object], None]:
    """`bound_once`'s `__setattr__`: a write to a slot by Megatron-LM's training module goes through
    only as `_goes_through` says; any other writer's goes through, is reported to `w.replaced`, and
    is kept in `w.foreign` (what it replaced, first write) and `w.foreign_now` (what it put there)."""

    def __setattr__(self: TransformerConfig, name: str, value: object) -> None:
        if name not in SLOTS:
            w.base.__setattr__(self, name, value)
            return
        value = cast("SlotValue", value)  # a callback slot of megatron's config: what its schedule calls
        writer = sys._getframe(1)
        module = str(writer.f_globals.get("__name__", "?"))
        if module != TRAINING:  # not train()'s binding: as under Megatron-LM, and logged
            was = w.base.__getattribute__(self, name)
            w.views.pop(name, None)
            w.base.__setattr__(self, name, value)
            w.foreign.setdefault(name, was)
            w.foreign_now[name] = value
            w.replaced(name, was, value, f"{module}:{writer.f_code.co_name}")
            return
        if value is None or _goes_through(name, value, w.base.__getattribute__(self, name), w.views, w.dropped):
            w.base.__setattr__(self, name, value)

    return __setattr__


def _goes_through(
    name: str, value: SlotValue, current: SlotValue, views: dict[str, SlotValue], dropped: list[str]
) -> bool:
    """Whether a binding write of `value` to slot `name`, which holds `current`, goes through: a
    second binding is dropped (recorded in `dropped`), train()'s one-element list of the bound
    callable is shown back from `views`, train()'s first binding of a slot goes through (its
    one-element list, then the callable in it), a different callable over a bound one is refused."""
    views.pop(name, None)
    if isinstance(value, list) and len(value) == 1 and not isinstance(current, list) and same(value[0], current):
        views[name] = value  # train() takes the single callable out of its list next
        return False
    if same(value, current):
        dropped.append(name)
        return False
    if isinstance(current, list) and len(current) == 1 and same(current[0], value):
        return True  # train() takes the single callable out of the one-element list it bound itself
    if current is not None:
        raise BindingError(
            f"Megatron-LM's train() would bind {name} to {short(value)} but the lifecycle bound "
            f"{short(current)}; the binding does not match Megatron-LM's, report it",
            state="CALLBACKS_BOUND",
        )
    return True


def short(value: SlotValue) -> str:
    """A slot value named by its functions (never a model's repr): a function or method by its
    qualified name, a partial by its function's, any other callable by its type."""
    entries = value if isinstance(value, list) else [value]
    names = [_name(e) for e in entries]
    return f"[{', '.join(names)}]" if isinstance(value, list) else names[0]


def _name(entry: object) -> str:
    if isinstance(entry, (types.FunctionType, types.MethodType, types.BuiltinFunctionType)):
        return entry.__qualname__
    if isinstance(entry, functools.partial):
        return f"partial({_name(entry.func)})"
    return "None" if entry is None else type(entry).__qualname__
