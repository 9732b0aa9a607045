"""The step bookkeeping's decisions, on chunks that record what megatron's DDP would be asked to do
(no torch): when step 1's parameter gather is deferred and when it comes back, what a failed step
undoes, what the watchdog's refusal leaves, and when `sync_params` gathers. Pinned down for
scripts/mutation (`core_entry.steps`); tests/integration/test_parity.py runs the same on megatron
with the distributed optimizer on 2 ranks."""

from __future__ import annotations

import dataclasses
import gc
import weakref
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import pytest

from bindings import BindingReport, CountingFinalizer, FinalizerNotCalled
from lifecycle import RunConfig, Runtime
from lifecycle.core_entry.steps import StepHandle, StepResult, Steps, StepsSlot, overlapped_gather, steps_for
from lifecycle.errors import DistributedError, LifecycleError
from lifecycle.log.records import Record
from lifecycle.rankwatch import RankWatch, WatchSettings
from lifecycle.testing import FirstStepWatchdog, fields_written
from states import State

OVERLAP = ["ddp.use_distributed_optimizer=true", "ddp.overlap_grad_reduce=true", "ddp.overlap_param_gather=true"]


class Chunk:
    """A DDP chunk with the forward pre-hook: logs each call into the shared `calls`."""

    def __init__(
        self, name: str, calls: list[tuple[Any, ...]], *, hook: bool = True, sync_error: Exception | None = None
    ) -> None:
        self.name, self.calls, self.use_forward_hook, self.sync_error = name, calls, hook, sync_error

    def disable_forward_pre_hook(self, param_sync: bool = True) -> None:
        self.calls.append(("disable", self.name, param_sync))

    def enable_forward_pre_hook(self) -> None:
        self.calls.append(("enable", self.name))

    def start_param_sync(self, *unused: Any, force_sync: bool = False) -> None:
        if self.sync_error is not None:
            raise self.sync_error
        self.calls.append(("sync", self.name, force_sync))


@dataclass
class Target:
    param_sync_func: Any = None


class Driver:
    """The part of a `Lifecycle` the step bookkeeping uses: a training plan advanced to `state`."""

    def __init__(self, runtime: Runtime, state: State = State.CALLBACKS_BOUND) -> None:
        self.runtime, self.state, self.target = runtime, state, State.CALLBACKS_BOUND
        self.records: list[dict[str, Any]] = []
        self.steps_slot = StepsSlot()

    def record(self, record: Record) -> None:
        event, fields = fields_written(record)
        self.records.append({"event": event, **fields})

    def events(self) -> list[str]:
        return [r["event"] for r in self.records]


def _report(target: Target, finalizer: CountingFinalizer | None = None) -> BindingReport:
    return BindingReport(
        target_type="Target",
        target_id="0x1",
        scheduler_config_id="0x1",
        provider_config_id=None,
        copied=False,
        slots=("param_sync_func",),
        chunks=2,
        optimizer=True,
        overlap_grad_reduce=True,
        overlap_param_gather=True,
        align_grad_reduce=True,
        align_param_gather=True,
        target_ref=weakref.ref(target),
        watchdog=FirstStepWatchdog(finalizer) if finalizer is not None else None,
        installed_ids=MappingProxyType({}),
    )


def _driver(
    overrides: list[str] | None = None,
    *,
    chunks: int = 2,
    binding: Any = None,
    hook: bool = True,
    watch: RankWatch | None = None,
    sync_error: Exception | None = None,
) -> tuple[Driver, list[Any]]:
    calls: list[tuple[Any, ...]] = []
    model = tuple(Chunk(f"c{i}", calls, hook=hook, sync_error=sync_error) for i in range(chunks))
    config = RunConfig.preset("tiny-gpt", OVERLAP if overrides is None else overrides)
    runtime = Runtime(
        config=config,
        model=model or None,
        binding=binding,  # type: ignore[arg-type]
        rank_watch=watch,
    )
    return Driver(runtime), calls


@pytest.mark.parametrize(
    ("overrides", "chunks", "hook", "expected"),
    [
        (OVERLAP, 2, True, True),
        (OVERLAP, 0, True, False),  # no model
        (OVERLAP, 2, False, False),  # chunks not wrapped with the pre-hook
        (OVERLAP[:2], 2, True, False),  # no overlapped param gather
        (["ddp.overlap_grad_reduce=true", "ddp.overlap_param_gather=true"], 2, True, False),  # no distributed optimizer
    ],
)
def test_the_gather_is_overlapped_only_with_the_distributed_optimizer_overlap_and_hooked_chunks(
    overrides: list[str], chunks: int, hook: bool, expected: bool
) -> None:
    lc, _ = _driver(overrides, chunks=chunks, hook=hook)
    assert overlapped_gather(lc.runtime) is expected


def test_a_single_chunk_without_the_hook_means_no_overlapped_gather() -> None:
    lc, _ = _driver()
    lc.runtime.model[1].use_forward_hook = False  # type: ignore[index, attr-defined]
    assert overlapped_gather(lc.runtime) is False


def test_chunks_not_wrapped_in_megatrons_ddp_mean_no_overlapped_gather() -> None:
    lc, _ = _driver()
    for chunk in lc.runtime.model:  # type: ignore[union-attr]
        del chunk.use_forward_hook  # type: ignore[attr-defined]
    assert overlapped_gather(lc.runtime) is False


def test_steps_need_callbacks_bound_and_a_model() -> None:
    lc, _ = _driver()
    lc.state = State.MODEL_BUILT
    with pytest.raises(LifecycleError, match=r"it is MODEL_BUILT\. Call lc.advance_to\(State.CALLBACKS_BOUND\)"):
        Steps(lc)
    empty, _ = _driver(chunks=0)
    with pytest.raises(LifecycleError, match="CALLBACKS_BOUND with a model"):
        Steps(empty)


def test_step_one_runs_without_the_gather_and_it_comes_back_after_it_succeeded() -> None:
    target = Target(param_sync_func="sync")
    finalizer = CountingFinalizer(lambda: None)
    lc, calls = _driver(binding=_report(target, finalizer))
    steps = Steps(lc)
    steps.begin(1)
    assert calls == [("disable", "c0", False), ("disable", "c1", False)]
    assert target.param_sync_func is None
    assert lc.records == [{"event": "param_gather_deferred", "step": 1, "chunks": 2, "param_sync_func": True}]
    finalizer()
    result = steps.end(1, 2.5)
    assert calls[2:] == [("enable", "c0"), ("enable", "c1")] and target.param_sync_func == "sync"
    assert lc.events() == ["param_gather_deferred", "first_step_finalized", "param_gather_resumed", "step_completed"]
    assert lc.records[2] == {"event": "param_gather_resumed", "step": 1, "chunks": 2}
    assert (result.step, result.loss, result.finalizer_calls) == (1, 2.5, 1)
    assert 0.0 <= result.duration_s < 60.0
    assert lc.records[3] == {"event": "step_completed", "step": 1, "loss": 2.5, "duration_s": result.duration_s}
    steps.begin(2)
    second = steps.end(2)
    assert len(calls) == 4 and second.finalizer_calls is None and steps.last_step == 2
    assert lc.events()[4:] == ["step_completed"]


def test_without_a_bound_param_sync_func_only_the_hooks_are_deferred() -> None:
    target = Target()
    lc, calls = _driver(binding=_report(target))
    steps = Steps(lc)
    steps.begin(1)
    assert lc.records[0]["param_sync_func"] is False and len(calls) == 2
    steps.end(1)
    assert target.param_sync_func is None and lc.events() == [
        "param_gather_deferred",
        "param_gather_resumed",
        "step_completed",
    ]


def test_no_deferral_when_asked_not_to_or_without_the_overlapped_gather() -> None:
    asked, plain = _driver()[0], _driver(OVERLAP[:2])[0]
    for lc, steps in ((asked, Steps(asked, defer_first_gather=False)), (plain, Steps(plain))):
        steps.begin(1)
        steps.end(1)
        assert lc.events() == ["step_completed"]


def test_a_failed_first_step_puts_the_gather_back_logs_no_completion_and_the_next_step_is_first_again() -> None:
    target = Target(param_sync_func="sync")
    lc, calls = _driver(binding=_report(target))
    steps = Steps(lc)
    with pytest.raises(RuntimeError, match="forward failed"), steps.step(1):
        raise RuntimeError("forward failed")
    assert calls[2:] == [("enable", "c0"), ("enable", "c1")] and target.param_sync_func == "sync"
    assert lc.events() == ["param_gather_deferred", "param_gather_resumed"]
    assert steps.first_pending and steps.last_step is None
    with steps.step(2) as handle:
        handle.loss = 1.0
    assert lc.events()[2:] == ["param_gather_deferred", "param_gather_resumed", "step_completed"]
    assert handle.result == StepResult(
        step=2,
        loss=1.0,
        duration_s=handle.result.duration_s,  # type: ignore[union-attr]
        finalizer_calls=None,
    )
    steps.abort(3)  # nothing deferred any more: nothing to undo
    assert lc.events()[-1] == "step_completed" and len(calls) == 8


def test_a_first_step_that_did_not_finalize_is_refused_and_the_gather_put_back() -> None:
    target = Target(param_sync_func="sync")
    lc, calls = _driver(binding=_report(target, CountingFinalizer(lambda: None)))
    steps = Steps(lc)
    steps.begin(1)
    with pytest.raises(FinalizerNotCalled):
        steps.end(1)
    assert target.param_sync_func == "sync" and calls[2:] == [("enable", "c0"), ("enable", "c1")]
    assert "step_completed" not in lc.events() and steps.last_step is None


def test_a_step_ended_without_begin_takes_no_time() -> None:
    lc, _ = _driver(OVERLAP[:2])
    steps = Steps(lc)
    assert steps.end(1).duration_s == 0.0
    steps.begin(2)
    assert steps.end(2).duration_s > 0.0
    assert steps.end(3).duration_s == 0.0  # the start was used up by step 2


def test_sync_params_gathers_every_chunk_and_logs_it_only_with_the_overlapped_gather() -> None:
    lc, calls = _driver()
    steps = Steps(lc, defer_first_gather=False)
    assert steps.sync_params() is True
    assert calls == [("sync", "c0", True), ("sync", "c1", True)]
    assert lc.records == [{"event": "params_synced", "reason": "after_last_step", "step": None, "chunks": 2}]
    steps.end(4)
    assert steps.sync_params("before_checkpoint_save") is True
    assert lc.records[-1] == {"event": "params_synced", "reason": "before_checkpoint_save", "step": 4, "chunks": 2}
    plain, plain_calls = _driver(OVERLAP[:2])
    assert Steps(plain).sync_params() is False and plain_calls == [] and plain.records == []


class Store(dict):  # type: ignore[type-arg]
    """The part of torch's Store a RankWatch uses to publish a failure."""

    def set(self, key: str, value: bytes) -> None:
        self[key] = value

    def compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        if self.get(key, b"") == expected:
            self[key] = desired
        return self[key]


@pytest.mark.parametrize(("ended", "trigger"), [(None, "step 0"), (5, "step 5")])
def test_a_sync_that_times_out_in_a_multi_rank_job_names_the_last_step(ended: int | None, trigger: str) -> None:
    watch = RankWatch(Store(), rank=0, world_size=2, settings=WatchSettings(timeout_s=5))
    lc, _ = _driver(watch=watch, sync_error=TimeoutError("all-gather timed out"))
    steps = Steps(lc, defer_first_gather=False)
    if ended is not None:
        steps.end(ended)
    with pytest.raises(DistributedError, match="timed out"):
        steps.sync_params()
    assert [r["trigger"] for r in lc.records if r["event"] == "state_timeout"] == [trigger]


def test_each_binding_has_its_own_bookkeeping_and_deferral_is_chosen_before_the_first_step() -> None:
    lc, _ = _driver(binding=_report(Target()))
    first = steps_for(lc, defer_first_gather=False)
    assert steps_for(lc) is first and first.defer_first_gather is False
    assert steps_for(lc, defer_first_gather=True).defer_first_gather is True
    first.end(1)
    assert steps_for(lc, defer_first_gather=False).defer_first_gather is True  # too late: step 1 ran
    lc.runtime = dataclasses.replace(lc.runtime, binding=_report(Target()))
    second = steps_for(lc)
    assert second is not first and second.first_pending and second.defer_first_gather is True
    # released (a restart back to VALIDATED): the step book's binding is gone with the runtime's,
    # so the old book is not reused, and a new one is refused below CALLBACKS_BOUND
    lc.runtime, lc.state = dataclasses.replace(lc.runtime, binding=None), State.VALIDATED
    gc.collect()
    assert second.binding is None
    with pytest.raises(LifecycleError, match=r"it is VALIDATED\. Call lc.advance_to"):
        steps_for(lc)


def test_the_step_records_are_frozen_and_built_with_keywords() -> None:
    result = StepResult(step=1, loss=None, duration_s=0.0, finalizer_calls=None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.step = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        StepResult(1, None, 0.0, None)  # type: ignore[misc]
    assert StepHandle(step=3) == StepHandle(3, None, None)
