"""The step API on `Lifecycle`: thin methods over `lifecycle.megatron.steps` (one implementation
of step bookkeeping, shared with `train_steps`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from lifecycle.megatron import steps as _impl

if TYPE_CHECKING:
    from lifecycle.megatron.steps import Driver, StepHandle, StepResult


class StepLoop:
    """Mixed into `Lifecycle`: `with lc.step(n) as s:`, `lc.after_step(n, loss=...)`, `lc.sync_params()`."""

    @contextmanager
    def step(self: Driver, n: int) -> Iterator[StepHandle]:
        """Around one hand-written training step (forward/backward and optimizer step inside).

        Step 1 defers the parameter gather (distributed optimizer with overlapped gather), the
        first step is checked by the binding's watchdog, and `step_completed` is logged with
        `s.loss`. Raises `FinalizerNotCalled` when the first step ran through an unbound config.
        """
        with _impl.steps_for(self).step(n) as handle:
            yield handle

    def after_step(self: Driver, n: int, *, loss: float | None = None) -> StepResult:
        """For loops that cannot use `with lc.step(n)`: the watchdog and `step_completed` after step
        `n` (the first-step gather deferral needs `lc.step`, which also calls this)."""
        return _impl.steps_for(self).end(n, loss)

    def sync_params(self: Driver, reason: str = "after_last_step") -> bool:
        """Force the parameter all-gather after the last step and before saving a checkpoint, as
        Megatron-LM does; False (nothing to do) unless the distributed optimizer overlaps it."""
        return _impl.steps_for(self).sync_params(reason)
