"""The engine: illegal triggers, failures, restarts, the context manager and config mutation."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from lifecycle import (
    ConfigError,
    ConfigMutated,
    InProcessPhases,
    InvalidTransition,
    Lifecycle,
    PhaseFailed,
    RunConfig,
)
from lifecycle.testing import allowed_triggers, check_log, read_log
from states import STARTUP_ORDER, State, Trigger


def drive_to(lc: Lifecycle, state: State) -> None:
    if state in STARTUP_ORDER:
        lc.advance_to(state)
    elif state is State.FAILED:
        lc.advance_to(State.SERVICES_READY)
        lc.fail("test")
    else:
        lc.shutdown()
    assert lc.state is state


ILLEGAL = [(s, t) for s in State for t in Trigger if t not in allowed_triggers(s) and t is not Trigger.SHUTDOWN]


@pytest.mark.parametrize(("state", "trigger"), ILLEGAL, ids=[f"{s.name}-{t.value}" for s, t in ILLEGAL])
def test_every_illegal_trigger_raises_invalid_transition_listing_the_allowed_ones(make_lc, state, trigger) -> None:
    lc = make_lc()
    drive_to(lc, state)
    with pytest.raises(InvalidTransition) as info:
        lc.fire(trigger)
    assert lc.state is state
    assert tuple(info.value.allowed) == allowed_triggers(state)
    for allowed in allowed_triggers(state):
        assert allowed.value in str(info.value)
    if state is not State.SHUT_DOWN:
        last = lc.records[-1]
        assert last["event"] == "invalid_transition" and last["trigger"] == trigger.value


def test_shutdown_is_idempotent(make_lc) -> None:
    lc = make_lc()
    lc.shutdown()
    lc.shutdown()
    assert lc.state is State.SHUT_DOWN


def test_unknown_trigger_names_the_real_ones(make_lc) -> None:
    with pytest.raises(InvalidTransition, match="validate, start_services"):
        make_lc().fire("vallidate")


def test_a_failing_phase_moves_to_failed_and_restart_recovers_in_a_new_generation(make_lc) -> None:
    phases = InProcessPhases(fail_on="build_model")
    lc = make_lc(phases=phases)
    with pytest.raises(PhaseFailed, match="build_model failed in DISTRIBUTED: RuntimeError: injected") as info:
        lc.advance_to(State.CALLBACKS_BOUND)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert lc.state is State.FAILED
    failed = [r for r in lc.records if r["event"] == "transition_failed"]
    assert failed[0]["trigger"] == "build_model" and failed[0]["error_type"] == "RuntimeError"
    phases.fail_on = None
    lc.restart()
    assert lc.state is State.VALIDATED and lc.runtime.generation == 1
    assert lc.runtime.model is None and not lc.runtime.distributed and not lc.runtime.services_ready
    lc.advance_to(State.CALLBACKS_BOUND)
    assert lc.records[-1]["generation"] == 1
    assert check_log(lc.records) == []


def test_advance_to_refuses_to_go_backwards_or_from_failed(make_lc) -> None:
    lc = make_lc()
    lc.advance_to(State.DISTRIBUTED)
    with pytest.raises(InvalidTransition, match="backwards"):
        lc.advance_to(State.VALIDATED)
    lc.fail()
    with pytest.raises(InvalidTransition, match="restart"):
        lc.advance_to(State.CALLBACKS_BOUND)


def test_rebuild_keeps_services_and_process_groups_and_drops_the_model(make_lc) -> None:
    lc = make_lc()
    lc.advance_to(State.CALLBACKS_BOUND)
    old_model = lc.runtime.model
    lc.rebuild()
    assert lc.state is State.DISTRIBUTED and lc.runtime.model is None and lc.runtime.binding is None
    assert lc.runtime.services_ready and lc.runtime.distributed
    lc.advance_to(State.CALLBACKS_BOUND)
    assert lc.runtime.model is not old_model
    bound = [r for r in lc.records if r["event"] == "callbacks_bound"]
    assert bound[-1]["target_id"] == hex(id(lc.runtime.model[0].config)) != bound[0]["target_id"]


def test_context_manager_shuts_down_on_error_and_records_the_failure(tmp_path: Path) -> None:
    with pytest.raises(KeyError), Lifecycle(RunConfig(), log_dir=tmp_path, phases=InProcessPhases()) as lc:
        lc.advance_to(State.MODEL_BUILT)
        raise KeyError("user code broke")
    assert lc.state is State.SHUT_DOWN
    records = read_log(tmp_path / "rank-00000.jsonl")
    assert [r["dest"] for r in records if r["event"] == "transition_completed"][-2:] == ["FAILED", "SHUT_DOWN"]
    assert check_log(records) == []


def test_mutating_the_validated_config_is_detected_with_the_field(make_lc) -> None:
    config = RunConfig()
    lc = make_lc(config=config)
    lc.validate()
    object.__setattr__(config.model, "num_layers", 8)
    with pytest.raises(ConfigMutated, match=r"model\.num_layers changed after VALIDATED \(2 -> 8\)") as info:
        lc.start_services()
    assert info.value.field == "model.num_layers"
    assert lc.state is State.FAILED
    mutated = [r for r in lc.records if r["event"] == "config_mutated"]
    assert mutated == [mutated[0]] and mutated[0]["field"] == "model.num_layers"


def test_an_unusable_log_dir_fails_validation_and_writes_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    lc = Lifecycle(RunConfig(), log_dir=blocker / "logs", phases=InProcessPhases())
    with pytest.raises(ConfigError, match="logging.log_dir") as info:
        lc.validate()
    assert info.value.field == "logging.log_dir"
    assert lc.state is State.FAILED and lc.log_path is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
    lc.shutdown()


def test_errors_pickle_across_processes_with_their_context() -> None:
    err = InvalidTransition("nope", state=State.CONFIGURED, trigger=Trigger.BUILD_MODEL, allowed=(Trigger.VALIDATE,))
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is InvalidTransition and str(back) == "nope"
    assert back.state is State.CONFIGURED and back.allowed == (Trigger.VALIDATE,)


def test_tripwire_policy_is_checked() -> None:
    with pytest.raises(ConfigError, match="'raise'"):
        Lifecycle(RunConfig(), phases=InProcessPhases(), tripwires="loud")  # type: ignore[arg-type]


def test_ranks_of_one_job_share_a_fingerprint_but_other_changes_do_not() -> None:
    base = RunConfig.from_dict({"backend": "fake", "parallel": {"world_size": 4096, "rank": 0}})
    other_rank = RunConfig.from_dict({"backend": "fake", "parallel": {"world_size": 4096, "rank": 3017}})
    bigger = RunConfig.from_dict({"backend": "fake", "parallel": {"world_size": 8192, "rank": 0}})
    assert base.fingerprint() == other_rank.fingerprint() != bigger.fingerprint()


def test_each_guard_is_evaluated_once_per_transition(make_lc) -> None:
    """The engine checks a row's guards once, before its entry work; the machine that holds the
    state has no conditions of its own to check them again."""
    from collections import Counter

    from states import TABLE, forward_trigger

    calls: Counter[tuple[str, str]] = Counter()
    saved = {row: row.guards for row in TABLE}

    def counting(row, guard):
        def counted(facts):
            calls[(row.trigger.value, guard.__name__)] += 1
            return guard(facts)

        counted.__name__, counted.__doc__ = guard.__name__, guard.__doc__
        return counted

    try:
        for row in TABLE:  # frozen rows: the counters go on where the engine finds the guards, and come off below
            object.__setattr__(row, "guards", tuple(counting(row, g) for g in saved[row]))
        make_lc().advance_to(State.CALLBACKS_BOUND)
    finally:
        for row, guards in saved.items():
            object.__setattr__(row, "guards", guards)
    fired = {forward_trigger(dest) for dest in STARTUP_ORDER[1:]}
    expected = Counter((row.trigger.value, g.__name__) for row in TABLE if row.trigger in fired for g in row.guards)
    assert len(expected) >= 5 and calls == expected  # each of the forward rows' guards, once
