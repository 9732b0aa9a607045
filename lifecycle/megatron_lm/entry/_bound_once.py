"""Megatron-LM's `train()` binds the scheduler callbacks itself; after CALLBACKS_BOUND it must not
bind them a second time. `bound_once(config)` makes that so while `train()` runs, without editing
`train()`: the model's TransformerConfig gets a subclass whose writes to a callback slot that would
put back what the slot already holds (a second binding) are dropped and recorded; a write of a
*different* callable is refused (the lifecycle bound something other than what Megatron-LM would);
`None` and restoring writes (train_step's pause of `param_sync_func`) go through. `train()`'s own
check that `no_sync_func` is unbound sees None until its binding write has been dropped.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lifecycle.errors import BindingError

SLOTS = ("finalize_model_grads_func", "grad_scale_func", "no_sync_func", "grad_sync_func", "param_sync_func")


def same(a: Any, b: Any) -> bool:
    """Two slot values bind the same callables (bound methods compare by owner and function)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a is b or (a is not None and b is not None and a == b)


@contextmanager
def bound_once(config: Any) -> Iterator[list[str]]:
    """While the block runs, `config`'s callback slots take no second binding; yields the slots
    whose second binding was dropped, in order."""
    base: Any = type(config)
    dropped: list[str] = []
    hidden = {"no_sync_func"} if getattr(config, "no_sync_func", None) is not None else set()

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if name in SLOTS and value is not None:
            current = base.__getattribute__(self, name)
            if same(value, current):
                dropped.append(name)
                hidden.discard(name)
                return
            if current is not None:
                raise BindingError(
                    f"Megatron-LM's train() would bind {name} to {value!r} but the lifecycle bound "
                    f"{current!r}; the binding does not match Megatron-LM's, report it", state="CALLBACKS_BOUND",
                )
        base.__setattr__(self, name, value)

    def __getattribute__(self: Any, name: str) -> Any:
        if name in hidden:
            return None
        return base.__getattribute__(self, name)

    namespace: dict[str, Any] = {"__setattr__": __setattr__, "__module__": base.__module__}
    if hidden:
        namespace["__getattribute__"] = __getattribute__
    config.__class__ = type(base.__name__, (base,), namespace)
    try:
        yield dropped
    finally:
        object.__setattr__(config, "__class__", base)
