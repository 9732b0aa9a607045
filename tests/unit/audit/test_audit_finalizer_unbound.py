"""A script's own write to a callback slot during Megatron-LM's `train()` goes through under the drop-in and
is logged (`callback_replaced`); the audit says whether the scheduler still reaches a finalizer (LA024)."""

from __future__ import annotations

from pathlib import Path

from audit_logs import engine_rank

from lifecycle.audit import audit
from lifecycle.log import records


def replaced_then_shut_down(log_dir: Path, *, slot: str, now: str) -> list[str]:
    lc = engine_rank(log_dir)
    lc.advance_to(lc.target)
    lc.record(records.CallbackReplaced(slot=slot, was="partial(finalize_model_grads)", now=now, writer="prof:hook"))
    lc.record(records.StepCompleted(step=1, loss=1.0, duration_s=0.01))
    lc.record(records.FirstStepFinalized(finalizer_calls=1))
    lc.shutdown()
    return [f.message for f in audit([str(log_dir)], jobs=1).findings if f.rule == "LA024"]


def test_a_finalizer_cleared_by_a_script_during_train_is_a_finding_naming_the_writer(tmp_path: Path) -> None:
    [message] = replaced_then_shut_down(tmp_path, slot="finalize_model_grads_func", now="None")
    assert message.startswith("prof:hook set finalize_model_grads_func to None (it was partial(finalize_model_grads))")
    assert "the scheduler skips gradient finalization" in message


def test_a_finalizer_wrapped_by_a_script_still_reaches_the_scheduler_and_is_no_finding(tmp_path: Path) -> None:
    assert replaced_then_shut_down(tmp_path / "wrap", slot="finalize_model_grads_func", now="Counting.__call__") == []
    assert replaced_then_shut_down(tmp_path / "other", slot="grad_scale_func", now="None") == []
