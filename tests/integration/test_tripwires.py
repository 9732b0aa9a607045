"""Tripwires catch RNG seeding, process groups and CUDA device calls made outside their owner."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch._dynamo  # wraps torch.manual_seed on first import (megatron imports it)
import torch.distributed as dist

from lifecycle import InProcessPhases, SideEffectError, TripwireViolation
from lifecycle.engine import copying_provider
from lifecycle.testing import patched_targets, read_log
from states import State

ORIGINAL_SEED = torch.manual_seed
ORIGINAL_RANDOM_SEED = torch.random.manual_seed
ORIGINAL_INIT_PG = dist.init_process_group


def violations(lc) -> list[dict]:  # type: ignore[no-untyped-def, type-arg]
    return [r for r in lc.records if r["event"] == "tripwire_violation"]


def test_user_code_that_seeds_the_rng_before_validation_is_refused_and_logged(make_lc) -> None:
    lc = make_lc()
    with pytest.raises(TripwireViolation, match=r"torch\.manual_seed was called in state CONFIGURED") as info:
        torch.manual_seed(1234)
    assert "Lifecycle.init_distributed()" in str(info.value)
    [v] = violations(lc)
    assert (v["kind"], v["owner"], v["state"], v["trigger"], v["policy"]) == (
        "rng",
        "init_distributed",
        "CONFIGURED",
        None,
        "raise",
    )


def test_user_code_that_creates_a_process_group_before_validation_is_refused(make_lc) -> None:
    lc = make_lc()
    with pytest.raises(TripwireViolation, match="process_group belongs to Lifecycle.init_distributed"):
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    assert not dist.is_initialized()
    assert violations(lc)[0]["target"].endswith("init_process_group")


def _provider_that_creates_its_own_process_group(config, *, pre_process, post_process, vp_stage):  # type: ignore[no-untyped-def]
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return copying_provider(config, pre_process=pre_process, post_process=post_process, vp_stage=vp_stage)


def test_a_provider_that_calls_init_process_group_itself_is_refused_and_the_lifecycle_fails(
    make_lc, tmp_path: Path
) -> None:
    lc = make_lc(provider=_provider_that_creates_its_own_process_group, log_dir=tmp_path)
    with pytest.raises(TripwireViolation, match="during build_model()"):
        lc.advance_to(State.CALLBACKS_BOUND)
    assert not dist.is_initialized()
    assert lc.state is State.FAILED
    on_disk = [r for r in read_log(tmp_path / "rank-00000.jsonl") if r["event"] == "tripwire_violation"]
    assert on_disk[0]["trigger"] == "build_model" and on_disk[0]["owner"] == "init_distributed"


class _SeedingPhases(InProcessPhases):
    def __init__(self) -> None:
        super().__init__()
        self.around(State.DISTRIBUTED, enter=self.seeding)

    def seeding(self, ctx, enter):  # type: ignore[no-untyped-def]
        runtime = enter(ctx)
        torch.manual_seed(ctx.runtime.config.training.seed)
        return runtime


def test_the_owning_transition_may_seed_and_the_call_is_logged_as_its_side_effect(make_lc) -> None:
    lc = make_lc(phases=_SeedingPhases())
    lc.advance_to(State.DISTRIBUTED)
    assert torch.initial_seed() == lc.runtime.config.training.seed
    rng = [r for r in lc.records if r["event"] == "side_effect" and r["kind"] == "rng"]
    assert len(rng) == 2 and {r["trigger"] for r in rng} == {"init_distributed"}
    assert violations(lc) == []


def test_warn_policy_logs_the_violation_and_lets_the_call_through(make_lc) -> None:
    lc = make_lc(tripwires="warn")
    torch.manual_seed(77)
    assert torch.initial_seed() == 77
    assert violations(lc)[0]["policy"] == "warn"


def test_tripwires_leave_no_trace_once_startup_completes_and_come_back_for_a_rebuild(make_lc) -> None:
    lc = make_lc()
    assert torch.manual_seed is not ORIGINAL_SEED
    lc.advance_to(State.CALLBACKS_BOUND)
    assert torch.manual_seed is ORIGINAL_SEED and dist.init_process_group is ORIGINAL_INIT_PG
    assert patched_targets() == []
    torch.manual_seed(5)  # training code after startup is not affected
    lc.rebuild()
    with pytest.raises(TripwireViolation):
        torch.manual_seed(5)
    lc.advance_to(State.CALLBACKS_BOUND)
    assert torch.manual_seed is ORIGINAL_SEED


def test_shutdown_removes_the_tripwires(make_lc) -> None:
    lc = make_lc()
    lc.advance_to(State.VALIDATED)
    lc.shutdown()
    assert torch.manual_seed is ORIGINAL_SEED and torch.random.manual_seed is ORIGINAL_RANDOM_SEED


def test_off_policy_installs_nothing(make_lc) -> None:
    make_lc(tripwires="off")
    assert torch.manual_seed is ORIGINAL_SEED


def test_a_side_effect_declared_outside_its_owner_is_refused(make_lc) -> None:
    def early(ctx, enter):  # type: ignore[no-untyped-def]
        from states import SideEffect

        ctx.side_effect(SideEffect.CALLBACKS)  # binding before MODEL_BUILT
        return enter(ctx)

    lc = make_lc(phases=InProcessPhases().around(State.SERVICES_READY, enter=early))
    with pytest.raises(SideEffectError, match="callbacks during start_services"):
        lc.advance_to(State.SERVICES_READY)
    refused = [r for r in lc.records if r["event"] == "side_effect_refused"]
    assert refused[0]["owner"] == "bind_callbacks" and lc.state is State.FAILED


def test_megatron_initialize_model_parallel_is_caught_when_megatron_is_loaded(make_lc) -> None:
    from megatron.core import parallel_state

    original = parallel_state.initialize_model_parallel
    lc = make_lc()
    with pytest.raises(TripwireViolation, match="initialize_model_parallel"):
        parallel_state.initialize_model_parallel()
    assert not parallel_state.model_parallel_is_initialized()
    lc.shutdown()
    assert parallel_state.initialize_model_parallel is original


def test_torch_imported_after_the_lifecycle_is_created_is_still_guarded(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from lifecycle import Lifecycle, RunConfig, InProcessPhases, TripwireViolation\n"
        "lc = Lifecycle(RunConfig(), phases=InProcessPhases())\n"
        "assert 'torch' not in sys.modules\n"
        "import torch\n"
        "try:\n    torch.manual_seed(1)\nexcept TripwireViolation:\n    print('refused')\n"
        "lc.shutdown()\n"
        "torch.manual_seed(1)\n"
        "print('hook left' if any('ImportHook' in type(h).__name__ for h in sys.meta_path) else 'clean')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parents[2]
    )
    assert out.stdout.split() == ["refused", "clean"]


# LA012 (here rather than with the other audit rules: it needs torch)
def test_a_tripwire_violation_under_the_warn_policy_is_reported_by_the_audit(tmp_path: Path) -> None:
    from lifecycle.audit import audit
    from tests.unit.audit.audit_logs import engine_rank, train_and_shut_down

    lc = engine_rank(tmp_path, tripwires="warn")
    torch.manual_seed(1)  # user code seeding before init_distributed: logged, allowed under "warn"
    train_and_shut_down(lc)
    result = audit([str(tmp_path)], jobs=1)
    assert {f.rule for f in result.findings} == {"LA012"}
    assert "torch.manual_seed" in result.findings[0].message
