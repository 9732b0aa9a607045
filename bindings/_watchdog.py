"""First-step watchdog: the installed finalizer counts its calls; after step one, exactly one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, ParamSpec, TypeVar

from bindings._errors import FinalizerNotCalled

P = ParamSpec("P")
R = TypeVar("R")

Emit = Callable[..., None]

# The watchdog's two startup-log events (lifecycle's event list includes them from here).
FIRST_STEP_FINALIZED = "first_step_finalized"
FIRST_STEP_NOT_FINALIZED = "first_step_not_finalized"


class CountingFinalizer(Generic[P, R]):
    """Wraps megatron's `finalize_model_grads`; the scheduler calls this object, which counts."""

    __slots__ = ("__weakref__", "calls", "fn")

    def __init__(self, fn: Callable[P, R]) -> None:
        self.fn = fn
        self.calls = 0

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        self.calls += 1
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        name = getattr(self.fn, "__qualname__", None) or getattr(
            getattr(self.fn, "func", None), "__qualname__", repr(self.fn)
        )
        return f"CountingFinalizer({name}, calls={self.calls})"


class FirstStepWatchdog:
    """Checks, once, that the first training step called the installed finalizer exactly once.

    Zero calls means the step ran through a config the engine did not bind (code that bypassed
    it, or a copied config); that raises `FinalizerNotCalled`. More than one is logged.
    """

    __slots__ = ("_finalizer", "_start", "checked")

    def __init__(self, finalizer: CountingFinalizer[..., None]) -> None:
        self._finalizer = finalizer
        self._start = finalizer.calls
        self.checked = False

    @property
    def finalizer(self) -> CountingFinalizer[..., None]:
        """The installed finalizer object (its `calls` count every call since binding)."""
        return self._finalizer

    @property
    def calls(self) -> int:
        """Finalizer calls since the watchdog was armed."""
        return self._finalizer.calls - self._start

    def after_step(self, emit: Emit | None = None) -> int | None:
        """Call after each training step; checks only after the first. Returns the calls checked."""
        if self.checked:
            return None
        self.checked = True
        calls = self.calls
        if calls == 1:
            if emit is not None:
                emit(FIRST_STEP_FINALIZED, finalizer_calls=calls)
            return calls
        if emit is not None:
            emit(FIRST_STEP_NOT_FINALIZED, finalizer_calls=calls)
        if calls == 0:
            raise FinalizerNotCalled(
                "the first training step finished without calling finalize_model_grads: "
                "finalizer_calls=0. The schedule read a config without the bound callbacks, so "
                "gradients were not reduced across data-parallel (and replicated TP) ranks. Run "
                "steps through the lifecycle's model, or pass the model whose "
                "get_model_config(model[0]) was bound; never call megatron's schedule with a "
                "provider config or a copied model.",
                finalizer_calls=calls,
            )
        return calls
