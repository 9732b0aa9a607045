"""`lifecycle simulate --scale`: the whole job's store traffic (the real rank watch of every rank
against a counting store) and a rank's process groups (megatron's real group creation on the fake
backend), as a user reads them; and the flags it refuses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = str(Path(sys.executable).parent)


def lifecycle(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lifecycle", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": f"{BIN}:/usr/bin:/bin"},
    )


def test_the_scale_report_gives_the_store_load_connections_and_groups_of_the_whole_job() -> None:
    run = lifecycle("simulate", "--preset", "gpt-4096", "--world-size", "512", "--scale", "--format", "json")

    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert (report["ranks"], report["nodes"]) == (512, 64)
    assert report["store_connections"] == 512 + 64  # a connection a rank, a watch connection a node
    assert report["watch"]["steady_second"]["per_rank"]["ranks_with_ops"] == 64  # the node leaders only
    assert 0 < report["watch_store_ops_per_s"] == report["watch"]["steady_second"]["host"]["ops"]
    own, megatron = report["creations"]["own"], report["creations"]["megatron"]
    assert report["groups_creation"] == "own" and report["groups"] == own  # the default creation
    assert report["groups_per_rank"] == own["created"] == own["member"] == len(own["by_kind"])  # its own only
    assert megatron["created"] > 512 and megatron["member"] == own["member"]  # megatron's: every group of the job
    assert report["distributed_cpu_s"] == {"megatron": megatron["distributed_cpu_s"], "own": own["distributed_cpu_s"]}
    assert report["startup_store_ops"] == round(
        report["watch"]["check_in"]["host"]["ops"] + report["watch"]["join"]["host"]["ops"]
    )
    assert set(report["watch"]) >= {"check_in", "join", "steady_second", "stop"}


@pytest.mark.release_independent  # the plan's arithmetic and CLI; the group counts per release: the test above
def test_the_startup_plan_predicts_each_phase_from_constants_measured_here_and_counts_of_the_real_code() -> None:
    run = lifecycle("simulate", "--preset", "gpt-4096", "--world-size", "512", "--plan", "--format", "json")

    assert run.returncode == 0, run.stderr
    plan = json.loads(run.stdout)
    phases = ["imports", "VALIDATED", "SERVICES_READY", "rendezvous", "groups", "MODEL_BUILT", "first step"]
    assert list(plan["phases_s"]) == list(plan["formulas"]) == phases  # the critical path, in order
    assert plan["total_s"] == pytest.approx(sum(plan["phases_s"].values()), abs=0.01)
    assert (plan["ranks"], plan["nodes"]) == (512, 64)
    constants, counts = plan["constants"], plan["counts"]
    assert all(constants[name] > 0 for name in ("import_s", "import_cpu_s", "store_rtt_s", "group_call_s", "model_s"))
    assert counts["groups_created"] > 512  # megatron's new_group calls on every rank, counted, not typed in
    own_calls = f"own groups only: {counts['groups_joined']} new_group calls"  # 20 on 0.19, 17 on 0.15.3
    assert plan["creation"] == "own" and plan["formulas"]["groups"].startswith(own_calls)
    assert plan["phases_s"]["groups"] == pytest.approx(constants["own_groups_s"], abs=0.001)  # measured at 512
    megatron_groups = counts["groups_created"] * constants["group_call_s"]
    rendezvous = plan["phases_s"]["rendezvous"]
    assert plan["distributed_s"]["megatron"] == pytest.approx(rendezvous + megatron_groups, abs=0.002)
    assert plan["distributed_s"]["own"] == pytest.approx(rendezvous + plan["phases_s"]["groups"], abs=0.002)
    assert "512 ranks" in plan["formulas"]["rendezvous"] and len(plan["assumptions"]) >= 3


@pytest.mark.release_independent  # the CLI's flag checks: exit 2 before anything is simulated
def test_the_scale_report_refuses_a_rank_selection_and_a_node_size_that_does_not_divide_the_job() -> None:
    selection = lifecycle("simulate", "--preset", "gpt-4096", "--scale", "--ranks", "0,1")
    uneven = lifecycle("simulate", "--preset", "gpt-4096", "--scale", "--ranks-per-node", "3")

    assert selection.returncode == uneven.returncode == 2
    assert selection.stderr.strip().splitlines() == [
        "lifecycle simulate: --ranks: --scale covers every rank of the job at once; drop --ranks, or drop --scale."
    ]
    assert "--ranks-per-node 3: must divide the 4096 ranks" in uneven.stderr


@pytest.mark.release_independent  # the CLI's checks of the world size, shared by both flags
@pytest.mark.parametrize(
    ("preset", "world", "code"),
    [("tiny-gpt", "6", 2), ("gpt-4096", "1000", 1), ("tiny-gpt", "16", 0)],
    ids=["nodes do not divide it", "the layout does not divide it", "taken"],
)
def test_the_plan_takes_and_refuses_the_world_sizes_the_scale_report_does(preset: str, world: str, code: int) -> None:
    scale = lifecycle("simulate", "--preset", preset, "--world-size", world, "--scale")
    plan = lifecycle("simulate", "--preset", preset, "--world-size", world, "--plan")

    assert scale.returncode == plan.returncode == code, (scale.stderr, plan.stderr)
    if code:  # the same refusal, naming the same field and fix
        assert scale.stderr == plan.stderr and scale.stderr.strip()
