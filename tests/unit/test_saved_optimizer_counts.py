"""The optimizer counts read back from the optimizer state a Megatron-LM checkpoint's common state keeps
(`saved_counts`, the lifecycle.core_entry internal), in each layout megatron-core 0.19 writes (tensors as floats
here: the reader takes a one-element tensor as a number). The FP32 optimizer's is the one a real
checkpoint holds (tests/integration/test_megatron_lm_resume.py reads it from Megatron-LM's own)."""

from __future__ import annotations

from typing import Any

from lifecycle.testing import saved_counts

GROUP = {"lr": 0.0, "betas": (0.9, 0.999), "weight_decay": 0.01}


def _torch_state(shared: float | None, **group: Any) -> dict[str, Any]:
    """A torch Adam's state dict after `MegatronOptimizer.sharded_state_dict`: the per-parameter tensors
    taken out, Adam's shared step kept as `state.common_step` (absent before the first step)."""
    state = {} if shared is None else {"common_step": shared}
    return {"state": state, "param_groups": [{**GROUP, "params": [0, 1], **group}, {**GROUP, "params": [2]}]}


def test_the_fp32_optimizers_shared_step_is_its_step_count_with_no_loss_scale() -> None:
    assert saved_counts(_torch_state(2.0)) == {"steps": [2.0], "loss_scale": None}


def test_an_optimizer_saved_before_its_first_step_has_no_step_count() -> None:
    assert saved_counts(_torch_state(None)) == {"steps": [], "loss_scale": None}


def test_the_float16_optimizers_dynamic_grad_scaler_gives_the_loss_scale() -> None:
    saved = {"optimizer": _torch_state(3.0), "grad_scaler": {"scale": 4096.0, "growth_tracker": 1}}
    assert saved_counts(saved) == {"steps": [3.0], "loss_scale": 4096.0}


def test_a_constant_grad_scaler_saves_nothing_and_its_scale_is_the_saved_loss_scale_argument() -> None:
    saved = {"optimizer": _torch_state(3.0), "grad_scaler": {}}
    assert saved_counts(saved, constant_scale=128.0) == {"steps": [3.0], "loss_scale": 128.0}
    assert saved_counts(saved) == {"steps": [3.0], "loss_scale": None}  # no --loss-scale saved: none to compare


def test_the_distributed_optimizer_keeps_its_step_in_its_parameter_groups_without_their_parameters() -> None:
    saved = {
        "optimizer": {"param_groups": [{**GROUP, "step": 5}, {**GROUP, "step": 5}]},
        "param_state_sharding_type": "dp_reshardable",
        "grad_scaler": {"scale": 65536.0},
    }
    assert saved_counts(saved) == {"steps": [5.0], "loss_scale": 65536.0}


def test_a_fused_adams_group_step_counts_only_where_the_group_holds_parameters() -> None:
    saved = {"state": {}, "param_groups": [{**GROUP, "params": [0], "step": 4}, {**GROUP, "params": [], "step": 0}]}
    assert saved_counts(saved) == {"steps": [4.0], "loss_scale": None}


def test_the_parameters_shared_step_is_read_before_a_groups_stale_copy() -> None:
    assert saved_counts(_torch_state(3.0, step=2)) == {"steps": [3.0], "loss_scale": None}


def test_a_chained_optimizer_gives_every_step_count_and_its_first_optimizers_loss_scale() -> None:
    saved = {
        0: {"optimizer": _torch_state(2.0), "grad_scaler": {"scale": 8.0}},
        1: {"optimizer": _torch_state(1.0), "grad_scaler": {"scale": 16.0}},
    }
    assert saved_counts(saved) == {"steps": [1.0, 2.0], "loss_scale": 8.0}
    assert saved_counts([saved[1], saved[0]])["loss_scale"] == 16.0  # the order they were saved in
