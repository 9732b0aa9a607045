"""A first-step guard for any training loop: the finalizer on the scheduler's config must run
exactly once per training step.

The guard wraps what `finalize_model_grads_func` holds on `get_model_config(model[0])` in a counter
and wraps the optimizer's `step` (on the instance): a training step ends at the optimizer step, so
forward-only steps (evaluation) are never counted, and the check runs before a step could apply
gradients nobody reduced. A loop without an optimizer calls `guard.after_step()` itself. After
`steps` checked steps the guard takes both wrappers off again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import TracebackType
from typing import Generic, ParamSpec, Protocol, TypeVar

from bindings._errors import BindingError, FinalizerNotCalled
from bindings._watchdog import FIRST_STEP_FINALIZED, FIRST_STEP_NOT_FINALIZED, Emit

_log = logging.getLogger("bindings.guard")
P = ParamSpec("P")
R = TypeVar("R")


class GuardedConfig(Protocol):
    """What the guard reads and writes of the scheduler's config (megatron's `TransformerConfig`)."""

    finalize_model_grads_func: Callable[..., None] | None


class SteppingOptimizer(Protocol):
    """What the guard wraps of the optimizer: its `step`, set on the instance and taken off again."""

    step: Callable[..., object]


class StepCounter(Generic[P, R]):
    """What the guard puts in `finalize_model_grads_func`: calls through, counting."""

    __slots__ = ("calls", "fn")

    def __init__(self, fn: Callable[P, R]) -> None:
        self.fn = fn
        self.calls = 0

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        self.calls += 1
        return self.fn(*args, **kwargs)


def _log_emit(event: str, **fields: object) -> None:
    _log.info("%s %s", event, " ".join(f"{k}={v}" for k, v in fields.items()))


class FirstStepGuard:
    """Counts finalizer calls per training step; raises `FinalizerNotCalled` after a checked step
    that called it 0 times or more than once."""

    __slots__ = ("_base", "_config", "_counter", "_emit", "_optimizer", "_previous", "checked", "steps")

    def __init__(
        self,
        config: GuardedConfig,
        optimizer: SteppingOptimizer | None = None,
        *,
        steps: int = 1,
        emit: Emit | None = None,
    ) -> None:
        if steps < 1:
            raise ValueError(f"steps={steps}: the guard checks at least the first step; pass 1")
        self._config, self.steps = config, steps
        self._emit: Emit = emit or _log_emit
        self._counter: StepCounter[..., None] | None = None
        self._optimizer: SteppingOptimizer | None = None  # whose step is wrapped, until disarm
        self._previous: Callable[..., object] | None = None
        self.checked = 0
        self._wrap_finalizer()  # sets _counter and _base
        if optimizer is not None:
            self._previous = vars(optimizer).get("step")  # an instance attribute to put back
            optimizer.step = self._guarded(optimizer.step)
            self._optimizer = optimizer

    def _wrap_finalizer(self) -> None:
        current = getattr(self._config, "finalize_model_grads_func", None)
        self._counter = None if current is None else StepCounter(current)
        if self._counter is not None:
            self._config.finalize_model_grads_func = self._counter
        self._base = 0

    def _guarded(self, inner: Callable[P, R]) -> Callable[P, R]:
        def step(*args: P.args, **kwargs: P.kwargs) -> R:
            self.after_step()
            return inner(*args, **kwargs)

        return step

    @property
    def armed(self) -> bool:
        return self.checked < self.steps

    def after_step(self, *, forward_only: bool = False) -> int | None:
        """Check the step that just ran (the optimizer's step calls this for you). Returns the
        finalizer calls it counted, None when it did not check (forward-only, done, rebound)."""
        if forward_only or not self.armed:
            return None
        current = getattr(self._config, "finalize_model_grads_func", None)
        if current is not self._counter:
            # Rebound since arming (Megatron-LM's train() binds after setup): count from here.
            self._wrap_finalizer()
            return None
        calls = 0 if self._counter is None else self._counter.calls - self._base
        self._base += calls
        self.checked += 1
        step = self.checked
        if calls == 1:
            self._emit(FIRST_STEP_FINALIZED, finalizer_calls=calls, step=step)
        else:
            self._emit(FIRST_STEP_NOT_FINALIZED, finalizer_calls=calls, step=step)
            self.disarm()
            raise FinalizerNotCalled(
                _message(calls, step, self._config), finalizer_calls=calls, step=step, config_id=hex(id(self._config))
            )
        if not self.armed:
            self.disarm()
        return calls

    def disarm(self) -> None:
        """Take the guard's wrappers off the config and the optimizer."""
        optimizer, self._optimizer = self._optimizer, None
        if optimizer is not None:
            if self._previous is None:
                del optimizer.step  # the class's step shows again
            else:
                optimizer.step = self._previous
        counter = self._counter
        if counter is not None and self._config.finalize_model_grads_func is counter:
            self._config.finalize_model_grads_func = counter.fn
        self.checked = max(self.checked, self.steps)

    def __enter__(self) -> FirstStepGuard:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.disarm()


def _message(calls: int, step: int, config: GuardedConfig) -> str:
    where = f"{type(config).__name__} at {hex(id(config))}"
    if calls == 0:
        return (
            f"training step {step} finished without calling finalize_model_grads "
            f"(finalizer_calls=0): the config the scheduler reads ({where}) "
            + (
                "has no finalize_model_grads_func"
                if config.finalize_model_grads_func is None
                else "holds a finalizer that did not run"
            )
            + ", so gradients were not reduced across data-parallel ranks. The callbacks were "
            "probably installed on another config (a provider's that the model copied); run "
            "bindings.check(model, ddp_config, optimizer) and bind to get_model_config(model[0])"
        )
    return (
        f"training step {step} called finalize_model_grads {calls} times (finalizer_calls={calls}); "
        f"each training step must finalize once ({where}). Call megatron's forward_backward_func "
        "once per step and do not call finalize_model_grads yourself after it"
    )


def scale_owner(config: GuardedConfig) -> SteppingOptimizer | None:
    """The optimizer a binding put on `config`: the object whose `scale_loss` its `grad_scale_func`
    is, or None when the slot is empty or holds a plain function."""
    return getattr(getattr(config, "grad_scale_func", None), "__self__", None)


def guard_config(
    config: GuardedConfig,
    optimizer: SteppingOptimizer | None = None,
    *,
    steps: int = 1,
    emit: Emit | None = None,
    require_optimizer: bool = False,
) -> FirstStepGuard:
    """`guard_first_step` on a scheduler config you already hold (no megatron needed): a
    `FirstStepGuard` on `config`, its optimizer defaulting to `scale_owner(config)`.

    `require_optimizer`: refuse a config whose `grad_scale_func` is empty, which every binding
    installs beside the finalizer, so nothing was bound there.
    """
    optimizer = scale_owner(config) if optimizer is None else optimizer
    if optimizer is None and require_optimizer:
        raise BindingError(
            f"a training step started but the config the scheduler reads ({type(config).__name__} at "
            f"{hex(id(config))}) has no grad_scale_func, so the callbacks were bound somewhere else "
            "(a provider's config the model copied?). Run bindings.check(model, ddp_config, "
            "optimizer) after setup and bind to get_model_config(model[0])",
            config_id=hex(id(config)),
            slot="grad_scale_func",
        )
    return FirstStepGuard(config, optimizer, steps=steps, emit=emit)
