"""Cases for test_own_groups.py, run inside spawned gloo ranks (`run_ranks`): the same tiny GPT
started and trained under each creation of megatron's groups, one after the other in the same
ranks; each returns its parallel state and its losses."""

from __future__ import annotations

from typing import Any

from lifecycle import Lifecycle, RunConfig
from states import State
from tests.integration import tiny_gpt

TINY = [*tiny_gpt.TINY, "optimizer.lr=0.01"]


def run(creation: str, overrides: list[str]) -> dict[str, Any]:
    """Start a tiny GPT with `distributed.groups=creation`, take its parallel state, train 3 steps."""
    from lifecycle.core_entry.train import train_steps
    from lifecycle.simulate import parallel_state_snapshot

    config = RunConfig.preset("tiny-gpt", [*TINY, *overrides, f"distributed.groups={creation}"])
    with Lifecycle(config) as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        state = parallel_state_snapshot()
        names = _group_names()
        losses = [r.loss for r in train_steps(lc, 3)]
    return {"state": state, "losses": losses, "names": names}


def _group_names() -> list[str]:
    """torch's names of this rank's groups but the world's (megatron's: a counter; own: a hash)."""
    from torch.distributed import distributed_c10d as c10d

    return [name for pg, name in c10d._world.pg_names.items() if pg is not c10d._world.default_pg]


def both(overrides: list[str]) -> dict[str, Any]:
    """`megatron` then `own` in the same rank."""
    return {creation: run(creation, overrides) for creation in ("megatron", "own")}
