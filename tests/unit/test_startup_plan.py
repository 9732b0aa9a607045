"""The startup plan (`lifecycle simulate --plan`): every phase of the critical path predicted from named
constants and counts, with its formula and the assumptions it rests on."""

from __future__ import annotations

from lifecycle.simulate import Plan
from lifecycle.testing import PlanConstants, PlanCounts, plan_text, predict

CONSTANTS = PlanConstants(
    import_s=7.0,
    store_rtt_s=60e-6,
    group_call_s=40e-6,
    validated_s=0.01,
    services_s=0.001,
    model_s=0.3,
)


def plan_at(ranks: int, created: int, *, cores_per_node: int | None = None) -> Plan:
    counts = PlanCounts(groups_created=created, groups_joined=20, checkin_ops_per_rank=6.0)
    return predict(CONSTANTS, counts, ranks=ranks, ranks_per_node=8, cores_per_node=cores_per_node)


def test_the_plan_names_every_phase_its_formula_and_its_assumptions() -> None:
    plan = plan_at(4096, 15_693)

    assert list(plan.phases) == [
        "imports",
        "VALIDATED",
        "SERVICES_READY",
        "rendezvous",
        "groups",
        "MODEL_BUILT",
        "first step",
    ]
    assert plan.formulas.keys() == plan.phases.keys()
    assert any("launch skew" in a for a in plan.assumptions) and any("store ops" in a for a in plan.assumptions)
    text = plan_text(plan)
    assert "15,693 new_group calls" in text and "assumptions:" in text
    assert plan.to_json()["total_s"] == round(plan.total_s, 3)


def test_the_store_bound_phases_grow_with_the_job_and_the_rest_do_not() -> None:
    small, large = plan_at(4096, 15_693), plan_at(131_072, 490_861)

    assert large.phases["rendezvous"] > 30 * small.phases["rendezvous"]  # the host serves every rank's check-in
    assert large.phases["groups"] > 30 * small.phases["groups"]  # O(world) new_group calls on every rank
    assert large.phases["imports"] == small.phases["imports"]
    assert large.phases["MODEL_BUILT"] == small.phases["MODEL_BUILT"]


def test_ranks_sharing_too_few_cores_slow_the_cpu_bound_phases() -> None:
    own, shared = plan_at(8, 100), plan_at(8, 100, cores_per_node=2)

    assert shared.phases["imports"] == 4 * own.phases["imports"]
    assert shared.phases["rendezvous"] == own.phases["rendezvous"]


def test_only_the_imports_cpu_time_is_shared_among_a_nodes_ranks_their_waiting_is_not() -> None:
    import dataclasses

    counts = PlanCounts(groups_created=100, groups_joined=20, checkin_ops_per_rank=6.0)
    split = dataclasses.replace(CONSTANTS, import_cpu_s=5.0)  # 5 s of CPU, 2 s waiting on the page cache
    own = predict(split, counts, ranks=8, ranks_per_node=8)
    shared = predict(split, counts, ranks=8, ranks_per_node=8, cores_per_node=2)

    assert own.phases["imports"] == 7.0
    assert shared.phases["imports"] == 2.0 + 5.0 * 4
    assert "wait 2.00 + CPU 5.00 × contention 4" in shared.formulas["imports"]
    threads = dataclasses.replace(CONSTANTS, import_cpu_s=9.0)
    over = predict(threads, counts, ranks=8, ranks_per_node=8, cores_per_node=2)
    assert over.phases["imports"] == 7.0 * 4  # CPU measured above the wall time (threads): all of it is CPU


def test_a_world_size_the_layout_does_not_divide_is_refused_before_anything_is_measured() -> None:
    """Measuring the plan's constants imports torch and megatron-core and builds a model: tens of
    CPU-seconds. A config that cannot run at the asked size is refused first, as `--scale` does."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from lifecycle.cli import main\n"
        "code = main(['simulate', '--preset', 'gpt-4096', '--world-size', '1000', '--plan'])\n"
        "print(code, sorted(m for m in ('torch', 'megatron.core') if m in sys.modules))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)

    assert run.stdout.splitlines()[-1] == "1 []", run.stderr
    assert "parallel.world_size=1000: not divisible by tp·pp·cp = 8·4·2 = 64" in run.stderr
    assert run.stderr.strip().splitlines()[-1] == "lifecycle simulate: nothing was counted."
