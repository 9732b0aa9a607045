"""`lifecycle simulate --plan` predicts DISTRIBUTED under both creations of megatron's groups: megatron's
(every group of the job on every rank, O(world)) and own groups only (measured at the job's size)."""

from __future__ import annotations

import dataclasses

import pytest

from lifecycle.testing import PlanConstants, PlanCounts, plan_text, predict

CONSTANTS = PlanConstants(
    import_s=7.0, store_rtt_s=60e-6, group_call_s=50e-6, validated_s=0.01, services_s=0.001, model_s=0.3
)
COUNTS = PlanCounts(groups_created=490_861, groups_joined=20, checkin_ops_per_rank=10.0)


def test_under_own_groups_the_groups_phase_is_the_measured_creation_and_both_creations_are_predicted() -> None:
    measured = dataclasses.replace(CONSTANTS, own_groups_s=0.25)
    own = predict(measured, COUNTS, ranks=131_072, ranks_per_node=8, creation="own")
    megatron = predict(measured, COUNTS, ranks=131_072, ranks_per_node=8, creation="megatron")

    assert own.phases["groups"] == 0.25
    assert megatron.phases["groups"] == pytest.approx(490_861 * 50e-6)
    rendezvous = own.phases["rendezvous"]
    assert (
        own.distributed_s
        == megatron.distributed_s
        == {
            "megatron": pytest.approx(rendezvous + 490_861 * 50e-6),
            "own": pytest.approx(rendezvous + 0.25),
        }
    )
    assert own.total_s == pytest.approx(megatron.total_s - megatron.phases["groups"] + 0.25)
    assert "own groups only: 20 new_group calls" in own.formulas["groups"]
    each = f"megatron {rendezvous + 490_861 * 50e-6:,.2f} s, own {rendezvous + 0.25:,.2f} s (the plan: own)"
    assert f"DISTRIBUTED (rendezvous + groups) by distributed.groups: {each}" in plan_text(own)
    assert own.to_json()["creation"] == "own"


def test_a_plan_for_own_groups_that_were_not_measured_is_refused() -> None:
    with pytest.raises(ValueError, match="own_groups_s is None"):
        predict(CONSTANTS, COUNTS, ranks=4096, ranks_per_node=8, creation="own")
    assert predict(CONSTANTS, COUNTS, ranks=4096, ranks_per_node=8).distributed_s.keys() == {"megatron"}
