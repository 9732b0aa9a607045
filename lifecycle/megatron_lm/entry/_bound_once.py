"""Megatron-LM's `train()` binds the scheduler callbacks itself; after CALLBACKS_BOUND it must not
bind them a second time. `bound_once(config)` makes that so while `train()` runs, without editing
`train()`: the model's TransformerConfig gets a subclass whose writes to a callback slot that would
put back what the slot already holds (a second binding) are dropped and recorded; a write of a
*different* callable is refused (the lifecycle bound something other than what Megatron-LM would);
`None` and restoring writes (train_step's pause of `param_sync_func`) go through. `train()`'s own
check that `no_sync_func` is unbound sees None, and its one-element list for one chunk reads back
as written, until its binding write has been dropped.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from lifecycle.errors import BindingError

if TYPE_CHECKING:
    from megatron.core.transformer import TransformerConfig

SLOTS = ("finalize_model_grads_func", "grad_scale_func", "no_sync_func", "grad_sync_func", "param_sync_func")


def same(a: object, b: object) -> bool:
    """Two slot values bind the same callables (bound methods compare by owner and function)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a is b or (a is not None and b is not None and a == b)


@contextmanager
def bound_once(config: TransformerConfig) -> Iterator[list[str]]:
    """While the block runs, `config`'s callback slots take no second binding; yields the slots
    whose second binding was dropped, in order."""
    base: Any = type(config)  # Any: megatron's config class, whose unbound methods are called with `self`
    dropped: list[str] = []
    # What train() reads back of a slot it is still writing: unbound (None) for its check that
    # no_sync_func is unset, then its own one-element list until it writes the single callable.
    views: dict[str, object] = {"no_sync_func": None} if getattr(config, "no_sync_func", None) is not None else {}

    def __setattr__(self: TransformerConfig, name: str, value: object) -> None:
        if (
            name not in SLOTS
            or value is None
            or _goes_through(name, value, base.__getattribute__(self, name), views, dropped)
        ):
            base.__setattr__(self, name, value)

    def __getattribute__(self: TransformerConfig, name: str) -> object:
        if name in views:
            return views[name]
        return base.__getattribute__(self, name)

    namespace: dict[str, object] = {"__setattr__": __setattr__, "__module__": base.__module__}
    if any(getattr(config, s, None) is not None for s in SLOTS[2:]):  # only then can train() read them back
        namespace["__getattribute__"] = __getattribute__
    config.__class__ = type(base.__name__, (base,), namespace)
    try:
        yield dropped
    finally:
        object.__setattr__(config, "__class__", base)


def _goes_through(name: str, value: object, current: object, views: dict[str, object], dropped: list[str]) -> bool:
    """Whether a binding write of `value` to slot `name`, which holds `current`, goes through: a
    second binding is dropped (recorded in `dropped`), train()'s one-element list of the bound
    callable is shown back from `views`, a different callable over a bound one is refused."""
    views.pop(name, None)
    if isinstance(value, list) and len(value) == 1 and not isinstance(current, list) and same(value[0], current):
        views[name] = value  # train() takes the single callable out of its list next
        return False
    if same(value, current):
        dropped.append(name)
        return False
    if current is not None:
        raise BindingError(
            f"Megatron-LM's train() would bind {name} to {_short(value)} but the lifecycle bound "
            f"{_short(current)}; the binding does not match Megatron-LM's, report it",
            state="CALLBACKS_BOUND",
        )
    return True


def _short(value: object) -> str:
    """A slot value named by its functions (never a model's repr)."""
    entries = value if isinstance(value, list) else [value]
    names = [getattr(e, "__qualname__", type(e).__name__) for e in entries]
    return f"[{', '.join(names)}]" if isinstance(value, list) else names[0]
