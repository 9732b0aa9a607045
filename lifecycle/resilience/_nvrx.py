"""Everything that depends on nvidia-resiliency-ext's `inprocess` API (0.4.1; the parts 0.6/0.7 share).

Used: `inprocess.Wrapper` (keyword arguments `store_kwargs`, `initialize`, `abort`,
`health_check`, the timeouts and intervals), `inprocess.CallWrapper` (passed to the function
through a parameter annotated with it; `.iteration`, `.base_store`),
`initialize.RetryController(max_iterations=)`, `abort.AbortTorchDistributed`, and
`monitor_thread.RankShouldRestart` (what a rank that did not fail receives). Not exercised here:
health checks (off: they need CUDA), rank reassignment after a rank is lost (every rank stays),
hard timeouts, `AbortTransformerEngine`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from nvidia_resiliency_ext import inprocess
    from torch.distributed import Store

T = TypeVar("T")

MONITOR_S = 0.1
"""How often the wrapper's monitor thread looks for a fault (`monitor_thread_interval`), and how
long it waits for concurrent faults before aborting (`last_call_wait`)."""
REACTION_S = 2 * (MONITOR_S + MONITOR_S)
"""Twice the longest the wrapper takes to tell every rank to restart after a fault is recorded."""


TIMEOUTS = ("soft_timeout", "hard_timeout", "barrier_timeout", "completion_timeout", "heartbeat_timeout")
"""The wrapper's own timeouts, read back into the restart cycles' `cycle_started` record."""


def read_timeouts(wrapper: inprocess.Wrapper) -> dict[str, float | None]:
    """The wrapper's own timeouts in seconds, read back from it (`soft_s`, ...; None where this
    release keeps none under that name)."""
    out: dict[str, float | None] = {}
    for name in TIMEOUTS:
        value = getattr(wrapper, name, None)
        out[name.replace("_timeout", "_s")] = value.total_seconds() if isinstance(value, timedelta) else None
    return out


def wrap(
    fn: Callable[[CallWrapper], T], *, max_cycles: int, min_world_size: int, port: int | None, timeout_s: float
) -> tuple[Callable[[], T], dict[str, float | None]]:
    """`fn(call_wrapper)` under an `inprocess.Wrapper` on CPU/gloo: restarted in place, on every rank,
    after a fault on any rank, up to `max_cycles` calls in all, and only while at least
    `min_world_size` ranks are there (nvrx's own default, 1, lets a survivor train alone). Also
    returns the wrapper's own timeouts, read back (`read_timeouts`)."""
    from nvidia_resiliency_ext import inprocess

    wrapper = _wrapper(max_cycles=max_cycles, min_world_size=min_world_size, port=port, timeout_s=timeout_s)

    def call(call_wrapper: CallWrapper) -> T:
        return fn(call_wrapper)

    # nvrx finds the parameter by its annotation, which must be the class itself (not a string)
    call.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(
                "call_wrapper", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=inprocess.CallWrapper
            )
        ]
    )
    return wrapper(call), read_timeouts(wrapper)


def _wrapper(*, max_cycles: int, min_world_size: int, port: int | None, timeout_s: float) -> inprocess.Wrapper:
    """The `inprocess.Wrapper` that `wrap` calls through: its store on `port` (nvrx's default when
    None), at most `max_cycles` calls with at least `min_world_size` ranks, nvrx's own abort of
    torch.distributed, no health check, and its timeouts from `timeout_s`."""
    from nvidia_resiliency_ext import inprocess
    from nvidia_resiliency_ext.inprocess.abort import AbortTorchDistributed
    from nvidia_resiliency_ext.inprocess.initialize import RetryController

    # The soft timeout (no progress) well after the collectives' own (`startup.timeout_s`): a rank
    # blocked in gloo raises at the collective's timeout, and a second RankShouldRestart must not
    # arrive while nvrx handles the first (it then escapes the wrapper).
    soft = timedelta(seconds=timeout_s * 3)
    return inprocess.Wrapper(
        store_kwargs={"port": port} if port is not None else {},
        initialize=RetryController(
            max_iterations=max_cycles, min_world_size=min_world_size, min_active_world_size=min_world_size
        ),
        abort=AbortTorchDistributed(),
        health_check=None,
        soft_timeout=soft,
        hard_timeout=soft * 2,
        barrier_timeout=soft * 3,
        completion_timeout=soft * 3,
        heartbeat_timeout=min(soft * 2, timedelta(seconds=30)),
        last_call_wait=timedelta(seconds=MONITOR_S),
        monitor_thread_interval=timedelta(seconds=MONITOR_S),
        monitor_process_interval=timedelta(seconds=0.2),
        progress_watchdog_interval=timedelta(seconds=0.2),
        heartbeat_interval=timedelta(seconds=0.5),
    )


class _CallWrapperMeta(type):
    def __subclasscheck__(cls, sub: type) -> bool:
        try:
            from nvidia_resiliency_ext.inprocess import CallWrapper
        except ImportError:  # no nvrx: nothing can be its CallWrapper
            return False
        return isinstance(sub, type) and issubclass(sub, CallWrapper)


class CallWrapperSlot(metaclass=_CallWrapperMeta):
    """An annotation that nvrx's Wrapper fills with its `CallWrapper` without importing nvrx here:
    it injects into each parameter whose annotation `issubclass(CallWrapper, annotation)` accepts
    (`param_utils.check_type`, 0.4.1 and later)."""


class CallWrapper(Protocol):
    """What the lifecycle reads of nvrx's `inprocess.CallWrapper` (0.4.1 and later)."""

    @property
    def iteration(self) -> int: ...
    @property
    def base_store(self) -> Store: ...


def iteration(call_wrapper: CallWrapper) -> int:
    return int(call_wrapper.iteration)


def base_store(call_wrapper: CallWrapper) -> Store:
    return call_wrapper.base_store


def is_restart_request(exc: BaseException) -> bool:
    """True for the exception nvrx raises into a rank that did not fail itself (also when it
    arrived inside a transition and the engine chained it under PhaseFailed)."""
    from nvidia_resiliency_ext.inprocess.monitor_thread import RankShouldRestart

    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, RankShouldRestart):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def is_restart_abort(exc: BaseException) -> bool:
    """True for the exception the wrapper raises when it gives up (`RestartAbort`: the cycles are
    spent, or fewer ranks than `min_world_size` are left)."""
    from nvidia_resiliency_ext.inprocess.exception import RestartAbort

    return isinstance(exc, RestartAbort)
