"""LA030 (steps need CALLBACKS_BOUND) and LA031 (each binding's steps need the watchdog's record),
on logs written by the real engine (`Lifecycle` with the in-process phases)."""

from __future__ import annotations

from pathlib import Path

from audit_logs import audit_rules, engine_rank, train_and_shut_down

from lifecycle import Lifecycle
from lifecycle.audit import audit
from lifecycle.log import records
from states import State


def _step(lc: Lifecycle, step: int) -> None:
    lc.record(records.StepCompleted(step=step, loss=1.0, duration_s=0.01))


def test_a_clean_training_run_has_no_step_findings(tmp_path: Path) -> None:
    train_and_shut_down(engine_rank(tmp_path), steps=3)
    assert audit_rules(tmp_path) == set()


def test_the_watchdog_record_before_the_step_record_is_accepted(tmp_path: Path) -> None:
    lc = engine_rank(tmp_path)
    lc.advance_to(State.CALLBACKS_BOUND)
    lc.record(records.FirstStepFinalized(finalizer_calls=1))  # what the step API writes: watchdog first
    _step(lc, 1)
    lc.shutdown()
    assert audit_rules(tmp_path) == set()


def test_a_step_before_callbacks_are_bound_is_reported_with_its_state(tmp_path: Path) -> None:
    lc = engine_rank(tmp_path)
    lc.advance_to(State.MODEL_BUILT)
    _step(lc, 1)
    lc.shutdown()
    result = audit([str(tmp_path)], jobs=1)
    [finding] = [f for f in result.findings if f.rule == "LA030"]
    assert "state MODEL_BUILT" in finding.message and finding.rank == 0


def test_a_step_after_a_rebuild_back_to_distributed_is_reported(tmp_path: Path) -> None:
    lc = engine_rank(tmp_path)
    lc.advance_to(State.CALLBACKS_BOUND)
    lc.record(records.FirstStepFinalized(finalizer_calls=1))
    _step(lc, 1)
    lc.rebuild()
    _step(lc, 2)
    lc.shutdown()
    assert "LA030" in audit_rules(tmp_path)


def test_an_inference_plan_that_logs_steps_is_not_reported(tmp_path: Path) -> None:
    lc = engine_rank(tmp_path, plan="inference")
    lc.advance_to(lc.target)
    _step(lc, 1)
    lc.shutdown()
    assert audit_rules(tmp_path) == set()


def test_steps_without_the_first_step_record_are_reported_once_per_binding(tmp_path: Path) -> None:
    lc = engine_rank(tmp_path)
    lc.advance_to(State.CALLBACKS_BOUND)
    for step in (1, 2, 3):
        _step(lc, step)
    lc.shutdown()
    result = audit([str(tmp_path)], jobs=1)
    [finding] = [f for f in result.findings if f.rule == "LA031"]
    assert "3 training step(s)" in finding.message
    assert {f.rule for f in result.findings} == {"LA031"}


def test_a_rebound_model_needs_its_own_first_step_record(tmp_path: Path) -> None:
    lc = engine_rank(tmp_path)
    lc.advance_to(State.CALLBACKS_BOUND)
    lc.record(records.FirstStepFinalized(finalizer_calls=1))
    _step(lc, 1)
    lc.rebuild()
    lc.advance_to(State.CALLBACKS_BOUND)
    _step(lc, 1)  # the new binding's first step, unchecked
    lc.shutdown()
    assert audit_rules(tmp_path) == {"LA031"}


def test_a_binding_without_steps_needs_no_first_step_record(tmp_path: Path) -> None:
    lc = engine_rank(tmp_path)
    lc.advance_to(State.CALLBACKS_BOUND)
    lc.rebuild()
    lc.advance_to(State.CALLBACKS_BOUND)
    lc.shutdown()
    assert audit_rules(tmp_path) == set()


def test_a_first_step_not_finalized_is_la011_not_la031(tmp_path: Path) -> None:
    train_and_shut_down(engine_rank(tmp_path), finalizer_calls=0)
    assert audit_rules(tmp_path) == {"LA011"}
