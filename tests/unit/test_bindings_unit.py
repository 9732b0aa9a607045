"""bindings without megatron: conflict policies, the chunk contract, unbinding, the watchdog.

The target here is any object with the `SchedulerConfig` fields; the integration tests bind real
megatron models.
"""

from __future__ import annotations

import pickle
import weakref
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import pytest

from bindings import BindingReport, CountingFinalizer, per_chunk, unbind_callbacks
from lifecycle.errors import BindingConflict, BindingError, FinalizerNotCalled
from lifecycle.log import events
from lifecycle.testing import SLOTS, FirstStepWatchdog, install, planned


@dataclass
class Target:
    finalize_model_grads_func: Any = None
    grad_scale_func: Any = None
    no_sync_func: Any = None
    grad_sync_func: Any = None
    param_sync_func: Any = None


def ours(*args: Any, **kwargs: Any) -> None:
    """A callback the binding installs."""


def users(*args: Any, **kwargs: Any) -> None:
    """A callback user code installed first (as MIMO does)."""


def test_a_slot_holding_another_callable_is_refused_naming_the_slot_and_both_callables() -> None:
    target = Target(no_sync_func=users)
    with pytest.raises(BindingConflict) as info:
        install(target, {"grad_scale_func": ours, "no_sync_func": ours})
    assert info.value.slot == "no_sync_func"
    message = str(info.value)
    assert "no_sync_func" in message and "users" in message and "ours" in message
    assert "policy='keep'" in message and "policy='replace'" in message


def test_a_refused_binding_writes_nothing() -> None:
    target = Target(no_sync_func=users)
    with pytest.raises(BindingConflict):
        install(target, {"grad_scale_func": ours, "no_sync_func": ours})
    assert target == Target(no_sync_func=users)


def test_keep_policy_leaves_the_users_callable_and_reports_it() -> None:
    target = Target(no_sync_func=users)
    done = install(target, {"grad_scale_func": ours, "no_sync_func": ours}, "keep")
    assert (target.no_sync_func, target.grad_scale_func) == (users, ours)
    assert done.kept == ("no_sync_func",) and "no_sync_func" not in done.installed


def test_replace_policy_overwrites_and_reports_it() -> None:
    target = Target(no_sync_func=users)
    done = install(target, {"no_sync_func": ours}, "replace")
    assert target.no_sync_func is ours and done.replaced == ("no_sync_func",)


def test_the_same_callable_already_in_place_is_not_a_conflict() -> None:
    target = Target(no_sync_func=[ours, users])
    install(target, {"no_sync_func": [ours, users]})
    assert target.no_sync_func == [ours, users]


def test_an_unknown_policy_is_refused_with_the_choices() -> None:
    with pytest.raises(BindingError, match=r"'keep'.*'replace'"):
        install(Target(), {}, "overwrite")  # type: ignore[arg-type]  # the wrong value on purpose


def test_binding_errors_pickle_across_processes_with_their_context() -> None:
    error = BindingConflict("conflict", slot="no_sync_func", existing="a", new="b")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is BindingConflict and back.slot == "no_sync_func" and str(back) == "conflict"


def test_sync_slots_take_the_callable_for_one_chunk_and_a_list_for_several() -> None:
    assert per_chunk([ours]) is ours
    assert per_chunk([ours, users]) == [ours, users]
    with pytest.raises(BindingError):
        per_chunk([])


def test_overlap_without_a_ddp_wrapped_chunk_is_refused() -> None:
    @dataclass
    class Overlap:
        overlap_grad_reduce: bool = True

    with pytest.raises(BindingError, match=r"chunk 0 is object.*DistributedDataParallel"):
        planned([object()], None, Overlap())


def test_no_optimizer_and_no_overlap_installs_nothing() -> None:
    assert planned([object()], None, None) == {}


def _report(target: Target, installed: dict[str, Any]) -> BindingReport:
    return BindingReport(
        target_type="Target",
        target_id=hex(id(target)),
        scheduler_config_id=hex(id(target)),
        provider_config_id=None,
        copied=False,
        slots=tuple(installed),
        chunks=1,
        optimizer=True,
        overlap_grad_reduce=False,
        overlap_param_gather=False,
        align_grad_reduce=True,
        align_param_gather=False,
        target_ref=weakref.ref(target),
        installed_ids=MappingProxyType({s: id(v) for s, v in installed.items()}),
    )


def test_unbinding_clears_only_slots_that_still_hold_what_was_installed() -> None:
    target = Target()
    done = install(target, {"grad_scale_func": ours, "no_sync_func": ours})
    report = _report(target, done.installed)
    target.no_sync_func = users
    assert unbind_callbacks(report) == ("grad_scale_func",)
    assert target == Target(no_sync_func=users)


def test_unbinding_after_the_config_is_gone_does_nothing() -> None:
    target = Target()
    report = _report(target, install(target, {"grad_scale_func": ours}).installed)
    del target
    assert unbind_callbacks(report) == ()


def test_report_log_fields_are_the_callbacks_bound_fields_of_the_log_format() -> None:
    fields = _report(Target(), {"grad_scale_func": ours}).log_fields()
    assert set(fields) == {
        "target_type",
        "target_id",
        "scheduler_config_id",
        "provider_config_id",
        "copied",
        "slots",
        "chunks",
        "overlap_grad_reduce",
        "overlap_param_gather",
        "policy",
    }


def test_slots_are_the_five_scheduler_callbacks() -> None:
    assert set(SLOTS) == set(Target.__dataclass_fields__)


class Log:
    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, event: str, **fields: Any) -> None:
        assert event in events.ALL
        self.records.append((event, fields))


def test_watchdog_logs_first_step_finalized_after_exactly_one_call() -> None:
    finalizer, log = CountingFinalizer(ours), Log()
    watchdog = FirstStepWatchdog(finalizer)
    finalizer([], None)
    assert watchdog.after_step(log) == 1
    finalizer([], None)
    assert watchdog.after_step(log) is None  # only the first step is checked
    assert log.records == [("first_step_finalized", {"finalizer_calls": 1})]


def test_watchdog_raises_with_an_explanation_when_the_first_step_never_finalized() -> None:
    log = Log()
    with pytest.raises(FinalizerNotCalled, match="finalizer_calls=0") as info:
        FirstStepWatchdog(CountingFinalizer(ours)).after_step(log)
    assert info.value.finalizer_calls == 0
    assert log.records == [("first_step_not_finalized", {"finalizer_calls": 0})]


def test_watchdog_logs_but_does_not_raise_on_a_double_finalization() -> None:
    finalizer, log = CountingFinalizer(ours), Log()
    watchdog = FirstStepWatchdog(finalizer)
    finalizer()
    finalizer()
    assert watchdog.after_step(log) == 2
    assert log.records == [("first_step_not_finalized", {"finalizer_calls": 2})]


def test_watchdog_counts_only_calls_after_it_was_armed() -> None:
    finalizer = CountingFinalizer(ours)
    finalizer()
    watchdog = FirstStepWatchdog(finalizer)
    finalizer()
    assert watchdog.calls == 1 and finalizer.calls == 2


@pytest.mark.parametrize("model", [object(), {"chunk": 0}, "model"])
def test_bind_callbacks_refuses_a_model_that_is_not_a_list_of_chunks(model: Any) -> None:
    from bindings import bind_callbacks

    with pytest.raises(BindingError, match=r"not a list of model chunks; .*not bind_callbacks\(model\[0\]"):
        bind_callbacks(model, None, None)


def test_an_empty_chunk_list_is_refused_with_zero_chunks() -> None:
    with pytest.raises(BindingError, match="at least one chunk") as info:
        per_chunk([])
    assert info.value.chunks == 0


def test_a_counting_finalizer_shows_the_wrapped_function_by_name() -> None:
    import functools

    assert repr(CountingFinalizer(ours)) == "CountingFinalizer(ours, calls=0)"
    bound = CountingFinalizer(functools.partial(users, pg_collection=None))
    bound()
    assert repr(bound) == "CountingFinalizer(users, calls=1)"
