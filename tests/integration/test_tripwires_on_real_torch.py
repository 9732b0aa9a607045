"""Tripwires on real torch: every watched call is caught, each under its own kind; they come back after
a restart; a second lifecycle, or a patch layered over ours, is respected when one is disarmed.

Written to kill the mutants scripts/mutation makes of lifecycle/engine/_tripwires.py and
_side_effects.py. No megatron: one mutant's run costs a torch import, not a megatron one.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch._dynamo  # wraps torch.manual_seed on first import (megatron imports it)
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from lifecycle import InProcessPhases, Lifecycle, RunConfig, TripwireViolation
from lifecycle.testing import patched_targets
from states import State

ORIGINAL_SEED = torch.manual_seed


def violations(lc: Any) -> list[dict[str, Any]]:
    return [r for r in lc.records if r["event"] == "tripwire_violation"]


PG = "torch.distributed.init_process_group"
# (patched attribute, name a violation reports, kind, the call). One function reached under two names
# gets one tripwire, named after the first.
CALLS: list[tuple[str, str, str, Callable[[], Any]]] = [
    ("torch.manual_seed", "torch.manual_seed", "rng", lambda: torch.manual_seed(1)),
    ("torch.random.manual_seed", "torch.random.manual_seed", "rng", lambda: torch.random.manual_seed(1)),
    (PG, PG, "process_group", lambda: dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)),
    (
        "torch.distributed.distributed_c10d.init_process_group",
        PG,
        "process_group",
        lambda: c10d.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1),
    ),
    ("torch.cuda.set_device", "torch.cuda.set_device", "cuda_device", lambda: torch.cuda.set_device(0)),
]


@pytest.mark.parametrize(("patched", "target", "kind", "call"), CALLS, ids=[c[0] for c in CALLS])
def test_every_watched_torch_call_is_caught_before_validation_with_its_kind(
    make_lc, patched: str, target: str, kind: str, call: Callable[[], Any]
) -> None:
    lc = make_lc()
    assert patched in patched_targets()
    with pytest.raises(TripwireViolation, match=f"{target} was called in state CONFIGURED") as info:
        call()
    assert info.value.kind.value == kind and info.value.target == target
    [v] = violations(lc)
    assert (v["target"], v["kind"]) == (target, kind)
    assert not dist.is_initialized()


def test_a_watched_call_inside_a_transition_that_does_not_own_it_names_that_transition(make_lc) -> None:
    def seeds(ctx, enter):  # type: ignore[no-untyped-def]
        torch.manual_seed(3)
        return enter(ctx)

    lc = make_lc(phases=InProcessPhases().around(State.SERVICES_READY, enter=seeds))
    lc.validate()
    with pytest.raises(TripwireViolation, match=r"during start_services\(\)"):
        lc.start_services()
    [v] = violations(lc)
    assert (v["trigger"], v["state"], v["owner"]) == ("start_services", "VALIDATED", "init_distributed")


def test_tripwires_are_armed_again_after_a_restart(make_lc) -> None:
    lc = make_lc()
    lc.advance_to(State.CALLBACKS_BOUND)
    assert torch.manual_seed is ORIGINAL_SEED and patched_targets() == []
    lc.restart()
    assert "torch.manual_seed" in patched_targets()
    with pytest.raises(TripwireViolation, match="in state VALIDATED"):
        torch.manual_seed(5)


def test_shutting_down_one_lifecycle_leaves_the_newer_ones_tripwires_armed(make_lc) -> None:
    first = make_lc()
    second = make_lc()
    first.shutdown()
    with pytest.raises(TripwireViolation):
        torch.manual_seed(5)
    assert violations(second) and not violations(first)
    second.shutdown()
    assert torch.manual_seed is ORIGINAL_SEED and patched_targets() == []


def test_a_patch_layered_over_a_tripwire_is_left_in_place_and_restored_later(make_lc) -> None:
    lc = make_lc()
    ours = torch.manual_seed
    layered = lambda seed: ours(seed)  # noqa: E731 - what the CPU rehearsal does
    torch.manual_seed = layered
    try:
        lc.shutdown()
        assert torch.manual_seed is layered
        assert patched_targets() == ["torch.manual_seed"]
    finally:
        torch.manual_seed = ours
    again = make_lc()
    again.shutdown()
    assert torch.manual_seed is ORIGINAL_SEED and patched_targets() == []


def test_a_watched_module_imported_after_arming_is_patched_when_the_next_transition_runs(make_lc) -> None:
    saved = sys.modules.pop("torch.random")
    try:
        lc = make_lc()
        assert "torch.random.manual_seed" not in patched_targets()
        sys.modules["torch.random"] = saved
        lc.validate()
        assert "torch.random.manual_seed" in patched_targets()
    finally:
        sys.modules["torch.random"] = saved


def test_the_original_function_runs_when_the_owner_calls_it(make_lc) -> None:
    def seeds(ctx, enter):  # type: ignore[no-untyped-def]
        torch.manual_seed(4321)
        return enter(ctx)

    lc = make_lc(phases=InProcessPhases().around(State.DISTRIBUTED, enter=seeds))
    lc.advance_to(State.DISTRIBUTED)
    assert torch.initial_seed() == 4321
    assert violations(lc) == []


def test_a_lifecycle_without_tripwires_does_not_disarm_anothers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    armed = Lifecycle(RunConfig(), log_dir=tmp_path / "a", tripwires="raise")
    quiet = Lifecycle(RunConfig(), log_dir=tmp_path / "b", tripwires="off")
    quiet.shutdown()
    try:
        with pytest.raises(TripwireViolation):
            torch.manual_seed(1)
    finally:
        armed.shutdown()


def test_a_watched_function_keeps_its_name_signature_and_docs_while_armed(make_lc) -> None:
    import inspect

    make_lc()
    assert torch.manual_seed is not ORIGINAL_SEED
    assert torch.manual_seed.__name__ == "manual_seed" and torch.manual_seed.__doc__ == ORIGINAL_SEED.__doc__
    assert inspect.signature(torch.manual_seed) == inspect.signature(ORIGINAL_SEED)


def test_a_patch_layered_over_a_tripwire_is_not_wrapped_again_by_a_later_refresh(make_lc, tmp_path) -> None:  # type: ignore[no-untyped-def]
    lc = make_lc()
    ours = torch.manual_seed
    layered = lambda seed: ours(seed)  # noqa: E731 - what the CPU rehearsal does
    torch.manual_seed = layered
    (tmp_path / "freshly_imported_module.py").write_text("X = 1\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import freshly_imported_module  # noqa: F401 - grows sys.modules, so the next transition refreshes

        lc.validate()
        assert torch.manual_seed is layered
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("freshly_imported_module", None)
        torch.manual_seed = ours
