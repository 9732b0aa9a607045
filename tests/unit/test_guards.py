"""Every guard is a pure predicate whose docstring states its rule, and the engine enforces it."""

from __future__ import annotations

import dataclasses

import pytest

from lifecycle import GuardRejected, InProcessPhases, Runtime
from lifecycle.testing import (
    Guard,
    config_is_validated,
    distributed_is_initialized,
    model_is_built,
    plan_allows_restart,
    plan_reaches_destination,
    services_are_ready,
)
from states import PLAN_TARGETS, TABLE, Facts, Plan, State, Trigger, rule

ALL_GUARDS = sorted({guard for row in TABLE for guard in row.guards}, key=lambda f: f.__name__)


@pytest.mark.parametrize("guard", ALL_GUARDS, ids=lambda f: f.__name__)
def test_every_guard_documents_the_ordering_rule_it_enforces(guard: Guard) -> None:
    assert len(rule(guard)) > 30 and guard.__doc__


def test_config_is_validated_only_after_validation() -> None:
    facts = Facts(state=State.VALIDATED, trigger=Trigger.START_SERVICES)
    assert not config_is_validated(facts)
    assert config_is_validated(dataclasses.replace(facts, config_validated=True))


def test_services_must_be_ready_before_distributed() -> None:
    facts = Facts(state=State.SERVICES_READY, trigger=Trigger.INIT_DISTRIBUTED, config_validated=True)
    assert not services_are_ready(facts)
    assert services_are_ready(dataclasses.replace(facts, services_ready=True))


def test_model_needs_distributed_and_binding_needs_a_model() -> None:
    facts = Facts(state=State.DISTRIBUTED, trigger=Trigger.BUILD_MODEL)
    assert not distributed_is_initialized(facts)
    assert distributed_is_initialized(dataclasses.replace(facts, distributed=True))
    assert not model_is_built(facts)
    assert model_is_built(dataclasses.replace(facts, model_built=True))


@pytest.mark.parametrize(
    ("plan", "trigger", "allowed"),
    [
        (Plan.CONVERT, Trigger.START_SERVICES, True),
        (Plan.CONVERT, Trigger.INIT_DISTRIBUTED, False),
        (Plan.INFERENCE, Trigger.BUILD_MODEL, True),
        (Plan.INFERENCE, Trigger.BIND_CALLBACKS, False),
        (Plan.TRAINING, Trigger.BIND_CALLBACKS, True),
        (Plan.RL, Trigger.BIND_CALLBACKS, True),
        (Plan.CONVERT, Trigger.SHUTDOWN, True),
    ],
)
def test_plans_stop_at_their_target(plan: Plan, trigger: Trigger, allowed: bool) -> None:
    row = next(row for row in TABLE if row.trigger is trigger)
    facts = Facts(state=State.CONFIGURED, trigger=trigger, dest=row.dest, plan=plan)
    assert plan_reaches_destination(facts) is allowed


def test_rl_refuses_a_second_initialization() -> None:
    assert not plan_allows_restart(Facts(state=State.FAILED, trigger=Trigger.RESTART, plan=Plan.RL))
    assert plan_allows_restart(Facts(state=State.FAILED, trigger=Trigger.RESTART, plan=Plan.TRAINING))


class _Forgetful(InProcessPhases):
    """Phases that 'forget' to produce what the next state needs."""

    def __init__(self, forget: str) -> None:
        super().__init__()
        self.forget = forget
        for state in (State.SERVICES_READY, State.DISTRIBUTED, State.MODEL_BUILT):
            self.around(state, enter=self.forgetting)

    def forgetting(self, ctx, enter):  # type: ignore[no-untyped-def]
        rt: Runtime = enter(ctx)
        if self.forget == "services" and ctx.trigger is Trigger.START_SERVICES:
            return dataclasses.replace(rt, services_ready=False)
        if self.forget == "distributed" and ctx.trigger is Trigger.INIT_DISTRIBUTED:
            return dataclasses.replace(rt, distributed=False)
        if self.forget == "model" and ctx.trigger is Trigger.BUILD_MODEL:
            return dataclasses.replace(rt, model=None)
        return rt


@pytest.mark.parametrize(
    ("forget", "at", "guard"),
    [
        ("services", State.SERVICES_READY, "services_are_ready"),
        ("distributed", State.DISTRIBUTED, "distributed_is_initialized"),
        ("model", State.MODEL_BUILT, "model_is_built"),
    ],
)
def test_engine_raises_guard_rejected_when_a_phase_did_not_produce_what_the_next_needs(
    make_lc, forget: str, at: State, guard: str
) -> None:
    lc = make_lc(phases=_Forgetful(forget))
    lc.advance_to(at)
    with pytest.raises(GuardRejected) as info:
        lc.advance_to(State.CALLBACKS_BOUND)
    assert info.value.guard == guard and lc.state is at
    assert [r for r in lc.records if r["event"] == "guard_rejected"][-1]["guard"] == guard


def test_convert_plan_is_refused_past_services_by_guard(make_lc) -> None:
    lc = make_lc(plan="convert")
    lc.advance_to(State.SERVICES_READY)
    with pytest.raises(GuardRejected, match="plan_reaches_destination"):
        lc.init_distributed()
    assert lc.state is State.SERVICES_READY


def test_inference_plan_never_binds_callbacks(make_lc) -> None:
    lc = make_lc(plan="inference")
    target = PLAN_TARGETS[Plan.INFERENCE]
    lc.advance_to(target)
    with pytest.raises(GuardRejected, match="plan_reaches_destination"):
        lc.advance_to(State.CALLBACKS_BOUND)
    assert lc.state is target and not [
        r for r in lc.records if r["event"] == "side_effect" and r["kind"] == "callbacks"
    ]


def test_rl_plan_refuses_restart(make_lc) -> None:
    lc = make_lc(plan="rl")
    lc.advance_to(State.CALLBACKS_BOUND)
    with pytest.raises(GuardRejected, match="second initialization"):
        lc.restart()
    assert lc.state is State.CALLBACKS_BOUND
