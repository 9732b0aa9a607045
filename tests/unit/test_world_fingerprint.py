"""One world: at check-in every rank agrees on its job and world size through the store; a
rank of another world fails at once, and so do the ranks of the first world waiting at the gate, each
naming both worlds. The launcher's own counts catch worlds that never meet (each node a world of its
own). On a store in memory; test_one_world.py runs it with real processes on a real TCPStore."""

from __future__ import annotations

import pytest

from lifecycle.errors import DistributedError
from lifecycle.rankwatch import RankWatch, WatchSettings, World, checked
from tests.unit.test_rank_watch_nodes import Counting


def world(rank: int, *, job: str | None = "job-a", size: int = 4) -> World:
    return World(job=job, world_size=size, endpoint="10.0.0.1:29500", generation=0, rank=rank)


def watch(store: Counting, rank: int, mine: World | None, size: int = 4) -> RankWatch:
    return RankWatch(
        store, rank=rank, world_size=size, settings=WatchSettings(timeout_s=5.0), node=f"n{rank // 2}", world=mine
    )


def test_ranks_of_one_world_check_in_with_one_compare_set_and_one_gate_read_each() -> None:
    store, plain = Counting(), Counting()
    for rank in range(4):
        watch(store, rank, world(rank)).checkin.register()
        watch(plain, rank, None).checkin.register()
    for rank in range(4):
        watch(store, rank, world(rank)).checkin.await_all()
        watch(plain, rank, None).checkin.await_all()
    extra = store.ops - plain.ops
    assert extra == {"compare_set": 4, "get": 4}, extra  # 2 operations a rank, once per initialization
    assert store.data["all_arrived"] == b"1"


def test_a_rank_of_another_job_fails_at_once_and_wakes_the_first_jobs_ranks_naming_both() -> None:
    store = Counting()
    watch(store, 0, world(0)).checkin.register()
    with pytest.raises(DistributedError) as intruder:
        watch(store, 1, world(1, job="job-b")).checkin.register()
    assert "two worlds met at the rendezvous 10.0.0.1:29500" in str(intruder.value)
    assert "'job-a'" in str(intruder.value) and "'job-b'" in str(intruder.value)
    assert intruder.value.field == "parallel.world_size"
    assert "checkin/1" not in store.data and int(store.data["arrived"]) == 1  # it never joined the count
    with pytest.raises(DistributedError) as waiting:  # rank 0 waits at the gate: the conflict is there
        watch(store, 0, world(0)).checkin.await_all()
    assert "this rank 0 is in job 'job-a'" in str(waiting.value) and "another is in job 'job-b'" in str(waiting.value)
    assert "rank 0 checked in first" in str(waiting.value)


def test_a_different_world_size_is_another_world_even_in_the_same_job() -> None:
    store = Counting()
    watch(store, 0, world(0, size=4)).checkin.register()
    with pytest.raises(DistributedError, match="of 4 ranks .* of 8 ranks|of 8 ranks .* of 4 ranks"):
        watch(store, 1, world(1, size=8), size=8).checkin.register()


def test_a_late_rank_of_another_world_fails_alone_when_the_first_world_is_complete() -> None:
    store = Counting()
    for rank in range(2):
        watch(store, rank, world(rank, size=2), size=2).checkin.register()
    with pytest.raises(DistributedError, match="two worlds met"):
        watch(store, 1, world(1, job="job-b", size=2), size=2).checkin.register()
    for rank in range(2):
        watch(store, rank, world(rank, size=2), size=2).checkin.await_all()  # the gate stayed open: no error
    assert store.data["all_arrived"] == b"1"


def test_an_unnamed_job_agrees_with_itself() -> None:
    store = Counting()
    for rank in range(2):
        watch(store, rank, world(rank, job=None, size=2), size=2).checkin.register()
    watch(store, 0, world(0, job=None, size=2), size=2).checkin.await_all()


SRUN_TORCHRUN = {"SLURM_STEP_NUM_NODES": "4", "TORCHELASTIC_RUN_ID": "r1", "GROUP_WORLD_SIZE": "1"}


@pytest.mark.parametrize(
    ("env", "size", "says"),
    [
        (SRUN_TORCHRUN, 8, "each node formed a world of its own"),
        ({"SLURM_STEP_NUM_TASKS": "16", "SLURM_PROCID": "3", "RANK": "3"}, 8, "SLURM_STEP_NUM_TASKS=16"),
        ({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "1", "RANK": "1"}, 2, "OMPI_COMM_WORLD_SIZE=4"),
    ],
)
def test_a_world_the_launchers_counts_say_is_part_of_the_job_is_refused_before_the_store(
    env: dict[str, str], size: int, says: str
) -> None:
    with pytest.raises(DistributedError, match=says) as refused:
        checked(0, size, 0, env)
    assert refused.value.field == "parallel.world_size"


@pytest.mark.parametrize(
    "env",
    [
        {**SRUN_TORCHRUN, "GROUP_WORLD_SIZE": "4"},  # every node in one rendezvous
        {"SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "0", "TORCHELASTIC_RUN_ID": "r", "RANK": "0"},  # torchrun's ranks
        {"SLURM_STEP_NUM_TASKS": "16", "SLURM_PROCID": "0", "RANK": "5"},  # RANK not srun's: someone else started it
        {"SLURM_STEP_NUM_TASKS": "8", "SLURM_PROCID": "3", "RANK": "3"},
        {},
    ],
)
def test_a_world_its_launcher_agrees_with_is_described_by_its_job_and_endpoint(env: dict[str, str]) -> None:
    mine = checked(3, 8, 2, {**env, "LIFECYCLE_RUN_ID": "job-z", "MASTER_ADDR": "h", "MASTER_PORT": "7"})
    assert mine == World(job="job-z", world_size=8, endpoint="h:7", generation=2, rank=3)
