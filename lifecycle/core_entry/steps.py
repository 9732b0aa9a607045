"""Step bookkeeping for any training loop: one implementation for `train_steps` and hand-written loops.

What Megatron-LM's `train()` does around its steps, per binding:

- with the distributed optimizer and `overlap_param_gather`, step 1 runs with every chunk's forward
  pre-hook disabled (without a gather) and `param_sync_func` taken off the config, so no
  all-gather hides an initialization or checkpoint-load error; both come back after the first
  step that succeeded (`param_gather_deferred`, `param_gather_resumed`);
- after the first step the binding's watchdog checks `finalize_model_grads` ran exactly once
  (`first_step_finalized`, or `first_step_not_finalized` and `FinalizerNotCalled`);
- every step is logged as `step_completed`;
- after the last step, and before any checkpoint save, a forced parameter all-gather
  (`params_synced`): otherwise each data-parallel rank holds stale values in the shards it does
  not own until the next forward.

`Lifecycle.step(n)`, `Lifecycle.after_step(n, loss=...)` and `Lifecycle.sync_params()` delegate
here (`steps_for(lc)`: one `Steps` per binding, made anew after a rebuild).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Protocol, cast

from bindings import BindingReport
from lifecycle.errors import LifecycleError
from lifecycle.log import records
from lifecycle.rankwatch import watched_step
from lifecycle.runtime import Runtime
from states import Plan, State, training_state, trains_in


class OverlapChunk(Protocol):
    """A chunk in megatron's DistributedDataParallel with the forward pre-hook (overlapped gather)."""

    def disable_forward_pre_hook(self, param_sync: bool = True) -> None: ...
    def enable_forward_pre_hook(self) -> None: ...
    def start_param_sync(self, *unused: object, force_sync: bool = False) -> None: ...


TRAINING_STATE = getattr(trains_in(Plan.TRAINING), "name", "")  # where the training plan trains


class StepsSlot:
    """Where a driver keeps the `Steps` of its current binding (`steps_for` fills it)."""

    __slots__ = ("steps",)

    def __init__(self) -> None:
        self.steps: Steps | None = None


class Driver(Protocol):
    """What the step bookkeeping uses of a `Lifecycle`."""

    @property
    def steps_slot(self) -> StepsSlot: ...

    @property
    def state(self) -> State: ...
    @property
    def target(self) -> State: ...
    @property
    def runtime(self) -> Runtime: ...
    def record(self, record: records.Record) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class StepResult:
    """One finished step: its number, mean loss (None off the last pipeline stage), duration and
    the finalizer calls the watchdog checked (None after the first step)."""

    step: int
    loss: float | None
    duration_s: float
    finalizer_calls: int | None


@dataclass(slots=True)
class StepHandle:
    """What `with lc.step(n) as s:` yields: set `s.loss`; `s.result` is filled when the block ends."""

    step: int
    loss: float | None = None
    result: StepResult | None = None


def overlapped_gather(runtime: Runtime) -> bool:
    """Megatron-LM's `should_disable_forward_pre_hook`: distributed optimizer with overlapped
    param gather, on DDP-wrapped chunks (the forward pre-hook gathers the parameters)."""
    ddp = runtime.config.ddp
    model = runtime.model or ()
    return (
        ddp.use_distributed_optimizer
        and ddp.overlap_param_gather
        and bool(model)
        and all(getattr(chunk, "use_forward_hook", False) for chunk in model)
    )


class Steps:
    """Step bookkeeping for one binding of one lifecycle (see the module docstring)."""

    def __init__(self, lc: Driver, *, defer_first_gather: bool = True) -> None:
        rt = lc.runtime
        if lc.state is not training_state(lc.target) or not rt.model:
            raise LifecycleError(
                f"training steps need a lifecycle at {TRAINING_STATE} with a model; it is "
                f"{lc.state.name}. Call lc.advance_to(State.{TRAINING_STATE}) with the training plan first."
            )
        self._lc = lc
        # Weakly: a restart's release must free the binding (its finalizer holds the process groups).
        self._binding = weakref.ref(rt.binding) if rt.binding is not None else None
        self.gather = overlapped_gather(rt)
        self.defer_first_gather = defer_first_gather
        self.first_pending = True
        self._paused: object = None  # the param_sync_func pause_param_sync took off
        self._deferred = False
        self._started: float | None = None
        self.last_step: int | None = None

    @property
    def binding(self) -> BindingReport | None:
        """The binding these steps book, None once it is released."""
        return self._binding() if self._binding is not None else None

    @property
    def _model(self) -> list[OverlapChunk]:
        # Read from the runtime each time: holding the chunks here would keep a rebuilt-away model alive.
        return [cast(OverlapChunk, chunk) for chunk in self._lc.runtime.model or ()]

    def begin(self, step: int) -> None:
        """Before step `step`'s forward: after a checkpoint load, the streams checked (`streams_checked`);
        on the first step, defer the parameter gather."""
        window = self._lc.runtime.resume_window
        checked = window.check(step) if window is not None else None  # once per load, whatever follows
        if checked is not None:
            self._lc.record(checked)
        if self.first_pending and self.gather and self.defer_first_gather and not self._deferred:
            from bindings import pause_param_sync

            for chunk in self._model:
                chunk.disable_forward_pre_hook(param_sync=False)
            if isinstance(self.binding, BindingReport):
                self._paused = pause_param_sync(self.binding)
            self._deferred = True
            self._lc.record(
                records.ParamGatherDeferred(
                    step=step, chunks=len(self._model), param_sync_func=self._paused is not None
                )
            )
        self._started = time.perf_counter()

    def end(self, step: int, loss: float | None = None) -> StepResult:
        """After step `step`'s optimizer step: watchdog, gather resumed after step 1, `step_completed`."""
        watchdog = getattr(self.binding, "watchdog", None)
        try:
            calls = watchdog.after_step(records.first_step(self._lc.record)) if watchdog is not None else None
        except BaseException:  # FinalizerNotCalled: the step does not count as completed
            self.abort(step)
            raise
        if self._deferred:
            self._resume(step)
        self.first_pending = False
        started, self._started = self._started, None
        duration = time.perf_counter() - started if started is not None else 0.0
        self.last_step = step
        self._lc.record(records.StepCompleted(step=step, loss=loss, duration_s=duration))
        return StepResult(step=step, loss=loss, duration_s=duration, finalizer_calls=calls)

    def _resume(self, step: int) -> None:
        from bindings import resume_param_sync

        for chunk in self._model:
            chunk.enable_forward_pre_hook()
        if isinstance(self.binding, BindingReport):
            resume_param_sync(self.binding, self._paused)
        self._paused, self._deferred = None, False
        self._lc.record(records.ParamGatherResumed(step=step, chunks=len(self._model)))

    def abort(self, step: int) -> None:
        """The step raised before `end`: undo a deferral (hooks and `param_sync_func` back, so the
        model matches its binding and nothing here holds it), no `step_completed`; the next step
        counts as the first again."""
        self._started = None
        if self._deferred:
            self._resume(step)

    @contextmanager
    def step(self, step: int) -> Iterator[StepHandle]:
        """`begin`, the caller's forward/backward/optimizer step, then `end`, or `abort` if it raised."""
        handle = StepHandle(step=step)
        with self.watched(step):
            self.begin(step)
            try:
                yield handle
            except BaseException:
                self.abort(step)
                raise
            handle.result = self.end(step, handle.loss)

    def watched(self, step: int) -> AbstractContextManager[None]:
        """Step `step` under the failure broadcast of a multi-rank job (lifecycle.rankwatch): a failure here is
        published, and a rank left waiting in a collective for a failed peer stops."""
        return watched_step(self._lc.runtime.rank_watch, self._lc.record, step)

    def sync_params(self, reason: str = "after_last_step") -> bool:
        """Force every chunk's parameter all-gather now (Megatron-LM's `force_param_sync`).

        Call after the last step and before saving a checkpoint; a no-op (False) unless the
        distributed optimizer overlaps its param gather. Logs `params_synced`.
        """
        if not self.gather:
            return False
        with self.watched(self.last_step or 0):
            for chunk in self._model:
                chunk.start_param_sync(force_sync=True)
        self._lc.record(records.ParamsSynced(reason=reason, step=self.last_step, chunks=len(self._model)))
        return True


def steps_for(lc: Driver, *, defer_first_gather: bool | None = None) -> Steps:
    """The `Steps` of `lc`'s current binding (a new one after a rebuild or rebind)."""
    slot = lc.steps_slot
    current = slot.steps
    if current is None or current.binding is None or current.binding is not lc.runtime.binding:
        current = slot.steps = Steps(lc)
    if defer_first_gather is not None and current.first_pending:
        current.defer_first_gather = defer_first_gather
    return current
