"""Hypothesis fires random triggers, legal and illegal, at the real engine (200 examples x 50 steps)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

from lifecycle.testing import lifecycle_state_machine

LifecycleMachine = lifecycle_state_machine()
LifecycleMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestLifecycleFuzz = LifecycleMachine.TestCase

RlMachine = lifecycle_state_machine(tripwires="warn")
RlMachine.TestCase.settings = settings(max_examples=50, stateful_step_count=50, deadline=None)
TestLifecycleFuzzWarnPolicy = RlMachine.TestCase
