"""`distributed.groups: own`: each rank creates only its own process groups, and megatron's parallel
state is the same as under megatron's own creation: every global (groups by ranks, backend, timeout
and group_desc; rank lists; `_global_process_group_list`) on every rank of a 256-rank job on the fake
backend, and on real gloo ranks, which also train to bit-identical losses."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from lifecycle import RunConfig
from lifecycle.core_entry.groups import own_ranks
from lifecycle.launchers.local import run_ranks
from lifecycle.simulate import compare_creations
from lifecycle.testing import count_groups
from tests.integration import own_groups_cases

EVERY_KIND = [  # TP, PP with VPP, CP with hierarchical CP, EP with its own ETP, DP, 2 optimizer instances
    "parallel.tp=2",
    "parallel.pp=4",
    "parallel.vpp=2",
    "parallel.cp=4",
    "parallel.ep=4",
    "parallel.etp=1",
    "model.num_layers=8",
    "model.num_moe_experts=8",
]
EVERY_KIND_EXTRA = {"hierarchical_context_parallel_sizes": [2, 2], "num_distributed_optimizer_instances": 2}


def test_a_ranks_own_groups_are_the_groups_rank_generator_lists_that_hold_it() -> None:
    from megatron.core.parallel_state import RankGenerator

    rng = random.Random(0)
    for _ in range(40):
        tp, pp, cp, dp, ep = (rng.choice([1, 2, 3]) for _ in range(5))
        offset = rng.choice([0, 3])
        for gen in (
            RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order="tp-cp-ep-dp-pp", rank_offset=offset),
            RankGenerator(tp=tp, ep=ep, dp=dp, pp=pp, cp=1, order="tp-cp-ep-pp-dp"),
        ):
            names = gen.order.split("-")
            for token in ("-".join(t) for n in range(1, len(names) + 1) for t in itertools.combinations(names, n)):
                every = gen.get_ranks(token)
                for rank in range(gen.world_size + offset + 1):
                    mine = own_ranks(gen.order, list(gen.ordered_size), token, rank, offset=gen.rank_offset)
                    assert mine == [g for g in every if rank in g], (gen.order, gen.ordered_size, token, rank)
                    if mine and len(every) % 2 == 0:  # a block of two consecutive groups, as megatron pairs them
                        i = every.index(mine[0]) // 2 * 2
                        block = own_ranks(
                            gen.order, list(gen.ordered_size), token, rank, offset=gen.rank_offset, block=2
                        )
                        assert block == every[i : i + 2]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("preset", "overrides", "extra"),
    [("tiny-gpt", EVERY_KIND, EVERY_KIND_EXTRA), ("gpt-4096", [], {})],
    ids=["tp-pp-vpp-hierarchical-cp-ep-etp-dp", "gpt-4096-layout"],
)
def test_every_parallel_state_global_is_megatrons_on_every_rank_of_a_256_rank_job(
    preset: str, overrides: list[str], extra: dict[str, Any]
) -> None:
    config = RunConfig.preset(preset, overrides)

    assert compare_creations(config, world_size=256, ranks=range(256), extra=extra) == []


def test_a_rank_creates_only_its_own_groups_whatever_the_size_of_the_job() -> None:
    config = RunConfig.preset("gpt-4096")
    small = count_groups(config, world_size=512, rank=3, creation="own")
    large = count_groups(config, world_size=16384, rank=3, creation="own")
    megatron = count_groups(config, world_size=512, rank=3, creation="megatron")

    assert small.created == small.member == large.created == large.member == megatron.member
    assert small.local_synchronization == small.created  # members only, never a world-wide call
    assert {kind: (m, m) for kind, (_c, m) in megatron.by_kind.items()} == small.by_kind
    assert megatron.created > 512 and small.creation == "own"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("nproc", "overrides"),
    [
        (2, []),
        (2, ["parallel.ep=2", "model.num_moe_experts=2"]),
        (4, ["parallel.tp=2", "parallel.pp=2", "model.num_layers=4"]),
        (8, ["parallel.pp=2", "parallel.ep=2", "model.num_layers=4", "model.num_moe_experts=2"]),
    ],
    ids=["2-ranks-dp2", "2-ranks-ep2-moe", "4-ranks-tp2-pp2", "8-ranks-pp2-ep2-dp4-moe"],  # MoE and TP: SP, a GPU
)
def test_own_groups_on_gloo_ranks_hold_megatrons_state_and_train_to_the_same_losses(
    nproc: int, overrides: list[str]
) -> None:
    ranks = run_ranks(own_groups_cases.both, nproc, overrides, timeout_s=600)

    for rank in ranks:
        megatron, own = rank["megatron"], rank["own"]
        assert own["state"] == megatron["state"]  # gloo twins, timeouts read back from each group
        assert own["losses"] == megatron["losses"]  # bit-identical
        assert all(name.isdigit() for name in megatron["names"])  # torch's counter: every group of the job
        assert not any(name.isdigit() for name in own["names"])  # named by their ranks: own groups only
    last = ranks[-1]["own"]["losses"]
    assert len(last) == 3 and all(isinstance(loss, float) for loss in last)
