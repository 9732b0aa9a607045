"""The transition table and its guards as a user meets them: which triggers each state allows, the
forward step into each state, and a refusal from every guard of the rebuild and restart rows.

Written to kill the mutants scripts/mutation makes of states/_table.py and states/_guards.py.
"""

from __future__ import annotations

import dataclasses

import pytest

from lifecycle import GuardRejected, InProcessPhases
from lifecycle.testing import allowed_triggers, find, plan_reaches_destination
from states import STARTUP_ORDER, TABLE, Facts, Plan, State, Transition, Trigger, forward_trigger, rule


@pytest.mark.parametrize("state", STARTUP_ORDER)
def test_every_startup_state_may_fail_and_shut_down(state: State) -> None:
    assert Trigger.FAIL in allowed_triggers(state)
    assert Trigger.SHUTDOWN in allowed_triggers(state)


def test_a_failed_lifecycle_may_restart_or_shut_down_but_not_fail_again() -> None:
    assert set(allowed_triggers(State.FAILED)) == {Trigger.RESTART, Trigger.SHUTDOWN}


def test_a_shut_down_lifecycle_allows_nothing() -> None:
    assert allowed_triggers(State.SHUT_DOWN) == ()


@pytest.mark.parametrize(
    ("dest", "trigger"),
    [
        (State.VALIDATED, Trigger.VALIDATE),
        (State.SERVICES_READY, Trigger.START_SERVICES),
        (State.DISTRIBUTED, Trigger.INIT_DISTRIBUTED),
        (State.MODEL_BUILT, Trigger.BUILD_MODEL),
        (State.CALLBACKS_BOUND, Trigger.BIND_CALLBACKS),
    ],
)
def test_the_forward_step_into_each_startup_state_is_its_own_trigger(dest: State, trigger: Trigger) -> None:
    assert forward_trigger(dest) is trigger


@pytest.mark.parametrize("dest", [State.CONFIGURED, State.FAILED, State.SHUT_DOWN])
def test_states_no_forward_step_reaches_are_refused_by_name(dest: State) -> None:
    with pytest.raises(ValueError, match=f"{dest.name} is not reached by a forward startup step"):
        forward_trigger(dest)


def test_find_returns_the_row_of_a_trigger_from_a_state_and_none_when_undefined() -> None:
    row = find(State.CALLBACKS_BOUND, Trigger.REBUILD)
    assert row is not None and row.dest is State.DISTRIBUTED
    assert find(State.CONFIGURED, Trigger.REBUILD) is None


def test_table_rows_cannot_be_changed_in_place() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        TABLE[0].dest = State.SHUT_DOWN  # type: ignore[misc]


def test_a_plan_without_a_destination_or_past_the_startup_passes_the_plan_guard() -> None:
    for dest in (None, State.FAILED, State.SHUT_DOWN):
        facts = Facts(state=State.VALIDATED, trigger=Trigger.FAIL, dest=dest, plan=Plan.CONVERT)
        assert plan_reaches_destination(facts)


def test_a_plan_may_reach_its_own_target_state_but_not_one_past_it() -> None:
    at_target = Facts(
        state=State.VALIDATED, trigger=Trigger.START_SERVICES, dest=State.SERVICES_READY, plan=Plan.CONVERT
    )
    past = dataclasses.replace(at_target, state=State.SERVICES_READY, dest=State.DISTRIBUTED)
    assert plan_reaches_destination(at_target)
    assert not plan_reaches_destination(past)


class _LosesProcessGroups(InProcessPhases):
    """Phases after which the runtime no longer has process groups (a fault tore them down)."""

    def __init__(self) -> None:
        super().__init__()
        self.around(State.MODEL_BUILT, enter=lambda ctx, enter: dataclasses.replace(enter(ctx), distributed=False))


def test_rebuild_is_refused_when_the_process_groups_are_gone(make_lc) -> None:
    lc = make_lc(phases=_LosesProcessGroups())
    lc.advance_to(State.MODEL_BUILT)
    with pytest.raises(GuardRejected) as info:
        lc.rebuild()
    assert info.value.guard == "distributed_is_initialized"
    assert lc.state is State.MODEL_BUILT


class _Unvalidated(InProcessPhases):
    """Phases whose runtime says the config was never validated."""

    def __init__(self) -> None:
        super().__init__()
        self.around(State.SERVICES_READY, enter=lambda ctx, enter: dataclasses.replace(enter(ctx), fingerprint=None))


def test_restart_and_distributed_init_need_a_validated_config(make_lc) -> None:
    lc = make_lc(phases=_Unvalidated())
    lc.advance_to(State.SERVICES_READY)
    with pytest.raises(GuardRejected) as info:
        lc.init_distributed()
    assert info.value.guard == "config_is_validated"
    with pytest.raises(GuardRejected) as info:
        lc.restart()
    assert info.value.guard == "config_is_validated"
    assert lc.state is State.SERVICES_READY


def test_rows_and_facts_are_built_by_keyword_so_a_reordered_field_cannot_shift_values() -> None:
    with pytest.raises(TypeError):
        Transition((State.CONFIGURED,), Trigger.VALIDATE, State.VALIDATED)  # type: ignore[misc]
    with pytest.raises(TypeError):
        Facts(State.CONFIGURED, Trigger.VALIDATE)  # type: ignore[misc]


def test_a_guard_cannot_change_the_facts_it_is_shown() -> None:
    facts = Facts(state=State.VALIDATED, trigger=Trigger.START_SERVICES)
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts.services_ready = True  # type: ignore[misc]


def test_the_rule_of_a_guard_with_a_longer_docstring_is_its_first_line() -> None:
    def checkpoint_is_loaded(facts: Facts) -> bool:
        """Weights are loaded before callbacks are bound.

        Megatron-Bridge loads them in setup(); here it is an ordering rule.
        """
        return True

    assert rule(checkpoint_is_loaded) == "Weights are loaded before callbacks are bound."
