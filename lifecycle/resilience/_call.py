"""Megatron-LM's `pretrain(..., store=, inprocess_call_wrapper=)` for the drop-in (docs/restart.md).

Megatron-LM's meaning: `inprocess_call_wrapper` is nvidia-resiliency-ext's `inprocess.CallWrapper`,
injected by its `Wrapper` around `pretrain`; each call (one restart iteration) rendezvouses on
`PrefixStore(str(iteration), store)`, `store` being the one the script made for it. The drop-in
keeps that, and:

- makes the parameter injectable (`injectable`): nvrx finds it by its annotation, and Megatron-LM's
  own `Optional[Any]` (or a postponed string annotation) is never matched;
- without `store`, rendezvouses on the wrapper's own store under a per-cycle prefix (as
  `InProcessRestart`) instead of failing in `PrefixStore`;
- uses a given wrapper as given, nvrx installed or not (nvidia-resiliency-ext >= 0.6 sits beside
  megatron-core 0.19): only its `iteration` and `base_store` are read; anything without an integer
  `iteration` is refused with a one-line ConfigError.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar

from lifecycle.errors import ConfigError
from lifecycle.resilience._nvrx import CallWrapperSlot

if TYPE_CHECKING:
    from torch.distributed import Store

F = TypeVar("F", bound=Callable[..., object])
PARAM = "inprocess_call_wrapper"
PREFIX = "megatron-lifecycle/cycle-{cycle}"


def injectable(fn: F) -> F:
    """`fn` with a runtime signature nvrx can inject its CallWrapper into: `inprocess_call_wrapper`
    annotated with `CallWrapperSlot`, every other annotation dropped (nvrx's `issubclass` check
    raises TypeError on a string annotation)."""
    signature = inspect.signature(fn)
    params = [
        p.replace(annotation=CallWrapperSlot if name == PARAM else inspect.Parameter.empty)
        for name, p in signature.parameters.items()
    ]
    fn.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=params,
        return_annotation=inspect.Signature.empty,
    )
    return fn


def _refuse(problem: str, field: str) -> ConfigError:
    return ConfigError(problem, field=field, problems=[problem])


def cycle_and_store(call_wrapper: object, store: Store | None) -> tuple[int | None, Store | None]:
    """(restart cycle, the store to rendezvous on) for `pretrain(store=, inprocess_call_wrapper=)`;
    (None, store) without a wrapper."""
    if call_wrapper is None:
        return None, store
    cycle = getattr(call_wrapper, "iteration", None)
    if isinstance(cycle, bool) or not isinstance(cycle, int):
        raise _refuse(
            f"{PARAM}: expected nvidia-resiliency-ext's inprocess.CallWrapper (an integer .iteration), "
            f"got {type(call_wrapper).__name__}; pass the one its Wrapper injects, or None",
            PARAM,
        )
    import torch.distributed as dist

    if store is not None:
        return cycle, dist.PrefixStore(str(cycle), store)
    base = getattr(call_wrapper, "base_store", None)
    if base is None:
        raise _refuse(
            f"store: {PARAM} was given without a store and has no base_store to rendezvous on; "
            "pass store= (Megatron-LM's maybe_wrap_for_inprocess_restart returns one)",
            "store",
        )
    return cycle, dist.PrefixStore(PREFIX.format(cycle=cycle), own_client(base))


_CLIENTS: dict[tuple[str, int], Store] = {}


def own_client(base: Store) -> Store:
    """A connection of our own to the wrapper's store (one per process, kept across cycles): the
    wrapper's monitor thread waits on its own connection 0.2 s at a time, and each rendezvous
    operation sent on that connection queued behind it (measured: DISTRIBUTED 2 s against 0.4 s
    in a new process). `base` itself when it names no host and port (not a TCPStore)."""
    host, port = getattr(base, "host", None), getattr(base, "port", None)
    if not isinstance(host, str) or not isinstance(port, int):
        return base
    if (host, port) not in _CLIENTS:
        import torch.distributed as dist

        timeout = getattr(base, "timeout", None) or timedelta(seconds=300)
        _CLIENTS[host, port] = dist.TCPStore(host, port, is_master=False, timeout=timeout, wait_for_workers=False)
    return _CLIENTS[host, port]


def client_timeout_s(base: Store) -> float | None:
    """The timeout of this process's own connection to the wrapper's store `base` (`own_client`: every
    cycle's rendezvous and cause go through it), in seconds, read back from the client (`store.timeout`):
    `base`'s own, else 300 s. None where the client keeps none to read."""
    try:
        return float(own_client(base).timeout.total_seconds())
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return None
