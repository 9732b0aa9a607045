from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from lifecycle import ConfigMutated, RunConfig
from lifecycle.config import Environment, config_drift, require_unchanged, snapshot_config, validate
from lifecycle.testing import check_names

CPU = Environment(env={"MASTER_ADDR": "h", "MASTER_PORT": "1"})
GPU_CONFIG = ["backend=nccl", "model.transformer_impl=transformer_engine"]


def test_intrinsic_validation_ignores_what_this_machine_lacks() -> None:
    config = RunConfig.preset("tiny-gpt", GPU_CONFIG)
    assert validate(config, environment=False) == []
    kinds = {(p.kind, p.field) for p in validate(config, CPU)}
    assert ("environment", "backend") in kinds and (
        "environment",
        "model.transformer_impl",
    ) in kinds
    with_gpu = dataclasses.replace(CPU, cuda=True, modules=frozenset({"transformer_engine"}))
    assert validate(config, with_gpu) == []


def test_a_missing_transformer_engine_names_the_extra_to_install() -> None:
    config = RunConfig.preset("tiny-gpt", GPU_CONFIG)
    fixes = [p.fix for p in validate(config, dataclasses.replace(CPU, cuda=True))]
    assert any("pip install megatron-lifecycle[te]" in fix for fix in fixes)


def test_the_validation_doc_lists_every_check() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "validation.md").read_text()
    for name, kind in check_names():
        assert f"`{name}`" in doc, name
        assert kind in doc


def test_a_run_config_mutated_behind_frozen_is_reported_with_the_field() -> None:
    config = RunConfig.preset("tiny-gpt")
    snap = snapshot_config(config)
    object.__setattr__(config.parallel, "tp", 2)
    assert config_drift(snap, config) == [("parallel.tp", 1, 2)]
    with pytest.raises(ConfigMutated) as info:
        require_unchanged(snap, config, what="the run config")
    assert info.value.field == "parallel.tp" and "was 1, is now 2" in str(info.value)


@dataclasses.dataclass
class _Plain:
    layers: list[int]
    hook: object = None


def test_in_place_edits_and_replaced_callables_are_drift_unless_ignored() -> None:
    obj = _Plain(layers=[1, 2])
    snap = snapshot_config(obj)
    obj.layers.append(3)
    obj.hook = print
    assert [d[0] for d in config_drift(snap, obj)] == ["hook", "layers"]
    assert [d[0] for d in config_drift(snap, obj, ignore={"hook"})] == ["layers"]


def test_bias_in_moe_layers_with_expert_tensor_parallelism_is_refused_naming_both_fixes() -> None:
    moe = ["model.num_moe_experts=8", "parallel.ep=2", "parallel.tp=2", "parallel.sequence_parallel=true"]
    problems = validate(RunConfig.preset("tiny-gpt", moe), environment=False)
    assert [(p.check, p.field) for p in problems] == [("experts", "model.add_bias_linear")]
    assert "parallel.etp=1" in problems[0].fix and "add_bias_linear=false" in problems[0].fix
    assert validate(RunConfig.preset("tiny-gpt", [*moe, "model.add_bias_linear=false"]), environment=False) == []
    assert validate(RunConfig.preset("tiny-gpt", [*moe, "parallel.etp=1"]), environment=False) == []


@pytest.mark.parametrize("checkpoint", ["checkpoint.save=ck", "checkpoint.load=ck"])
def test_distributed_optimizer_checkpoints_without_apex_or_te_are_refused_naming_the_combination(
    checkpoint: str,
) -> None:
    config = RunConfig.preset("tiny-gpt", ["ddp.use_distributed_optimizer=true", checkpoint])
    env = dataclasses.replace(CPU, checkpoint_problem=None)
    refused = [p for p in validate(config, env) if p.check == "distributed_optimizer_checkpoints"]
    assert len(refused) == 1 and refused[0].field == "ddp.use_distributed_optimizer"
    assert checkpoint.split("=")[0] in refused[0].message and "Apex or Transformer Engine" in refused[0].message
    for module in ("apex", "transformer_engine"):  # either optimizer handles the step
        with_module = dataclasses.replace(env, modules=frozenset({module}))
        assert not [p for p in validate(config, with_module) if p.check == "distributed_optimizer_checkpoints"]
    plain = RunConfig.preset("tiny-gpt", ["ddp.use_distributed_optimizer=true"])
    assert not [p for p in validate(plain, env) if p.check == "distributed_optimizer_checkpoints"]
