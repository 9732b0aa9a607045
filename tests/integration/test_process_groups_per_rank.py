"""Under `distributed.groups: megatron` one rank of a large job creates a process group for every
group of the job and joins a handful: megatron's real `initialize_model_parallel`, driven by the
engine on the fake backend, counted (`own`: tests/integration/test_own_groups.py)."""

from __future__ import annotations

from lifecycle import RunConfig
from lifecycle.testing import count_groups


def test_a_rank_creates_every_group_of_the_job_and_joins_one_of_each_kind() -> None:
    config = RunConfig.preset("gpt-4096")  # TP8 PP4 CP2 EP8: 256 ranks is its smallest world
    small = count_groups(config, world_size=256, rank=3, creation="megatron")
    double = count_groups(config, world_size=512, rank=3, creation="megatron")

    assert small.member == len(small.by_kind) == double.member
    assert all(member == 1 for _created, member in small.by_kind.values())
    tp_groups = small.by_kind["TENSOR_MODEL_PARALLEL_GROUP"]
    assert tp_groups == (256 // 8, 1)
    assert double.by_kind["TENSOR_MODEL_PARALLEL_GROUP"] == (512 // 8, 1)
    assert small.created == sum(created for created, _member in small.by_kind.values()) > 256
    assert double.created > 1.5 * small.created  # O(world) calls on every rank
    assert small.local_synchronization == 0  # megatron asks for world-wide naming: every rank calls every group
    json = small.to_json()
    assert json["created"] == small.created and json["with_local_synchronization"] == small.member
