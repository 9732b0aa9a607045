"""The step API on `Lifecycle` (`lc.step`, `lc.after_step`, `lc.sync_params`) with the in-process
phases: where it may run, what it logs, and that each binding gets its own bookkeeping. The
watchdog, the first-step gather and the parameter sync run on megatron in
tests/integration/test_parity.py."""

from __future__ import annotations

import pytest

from lifecycle import InProcessPhases, Lifecycle, LifecycleError, RunConfig
from states import State


def _lifecycle() -> Lifecycle:
    return Lifecycle(RunConfig(), phases=InProcessPhases(), tripwires="off", options={"keep_records": True})


def _steps(lc: Lifecycle) -> list[tuple[int, float | None]]:
    return [(r["step"], r["loss"]) for r in lc.records if r["event"] == "step_completed"]


def test_a_step_before_callbacks_bound_is_refused_with_the_fix() -> None:
    with _lifecycle() as lc:
        lc.advance_to(State.MODEL_BUILT)
        refused = pytest.raises(LifecycleError, match=r"MODEL_BUILT.*advance_to\(State.CALLBACKS_BOUND\)")
        with refused, lc.step(1):
            pass
        assert _steps(lc) == []


def test_each_step_is_logged_with_its_number_and_loss() -> None:
    with _lifecycle() as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        for step in (1, 2):
            with lc.step(step) as handle:
                handle.loss = 1.0 / step
            assert handle.result is not None and handle.result.step == step
        result = lc.after_step(3, loss=0.25)
        assert (result.step, result.loss) == (3, 0.25)
        assert _steps(lc) == [(1, 1.0), (2, 0.5), (3, 0.25)]


def test_a_step_that_raises_is_not_logged_as_completed() -> None:
    with _lifecycle() as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        with pytest.raises(RuntimeError, match="forward failed"), lc.step(1):
            raise RuntimeError("forward failed")
        assert _steps(lc) == []


def test_parameter_sync_is_a_no_op_without_the_distributed_optimizers_overlapped_gather() -> None:
    with _lifecycle() as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        assert lc.sync_params() is False
        assert not [r for r in lc.records if r["event"] == "params_synced"]


def test_a_rebuilt_and_rebound_model_gets_new_step_bookkeeping() -> None:
    from lifecycle.core_entry.steps import steps_for

    with _lifecycle() as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        first = steps_for(lc)
        lc.after_step(1)
        assert steps_for(lc) is first and not first.first_pending
        lc.rebuild()
        lc.advance_to(State.CALLBACKS_BOUND)
        second = steps_for(lc)
        assert second is not first and second.first_pending
