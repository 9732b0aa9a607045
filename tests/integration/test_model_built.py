"""MODEL_BUILT on real megatron-core (CPU, 2 gloo ranks): providers per chunk, DDP, optimizer,
and megatron's schedules calling the bound finalizer exactly once per training step.

One spawned group runs every case; parallel_state is rebuilt between cases.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from lifecycle.launchers.local import run_ranks

pytestmark = pytest.mark.slow


class RecordingProvider:
    """The tiny GPT provider, recording the (pre_process, post_process, vp_stage) of each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[bool, bool, int | None]] = []

    def __call__(self, config: Any, *, pre_process: bool, post_process: bool, vp_stage: int | None, inputs: Any) -> Any:
        from lifecycle.core_entry.providers import gpt_provider

        self.calls.append((pre_process, post_process, vp_stage))
        return gpt_provider(
            config, pre_process=pre_process, post_process=post_process, vp_stage=vp_stage, inputs=inputs
        )


def _stages() -> dict[str, Any]:
    import megatron_cases as mc

    out = {}
    for name, (pp, vpp) in {"pp1": (1, None), "pp2": (2, None), "pp2_vpp2": (2, 2)}.items():
        provider = RecordingProvider()
        with mc.parallel(pp=pp, vpp=vpp):
            ctx = mc.build(mc.run_config(pp=pp, vpp=vpp), provider)
            out[name] = {"calls": provider.calls, "event": ctx.last("model_built")}
    return out


def _schedules() -> dict[str, Any]:
    import megatron_cases as mc

    out: dict[str, Any] = {}
    for pp in (1, 2):
        with mc.parallel(pp=pp):
            rt = mc.bind(mc.build(mc.run_config(pp=pp))).runtime
            for mb in (1, 3):
                out[(pp, mb, False)] = mc.train_step(rt, mb)
                out[(pp, mb, True)] = mc.train_step(rt, mb, forward_only=True)
    return out


def _runs() -> dict[str, Any]:
    import megatron_cases as mc
    from megatron.core import parallel_state as ps

    out: dict[str, Any] = {}
    with mc.parallel(pp=2, vpp=2):
        ctx = mc.bind(mc.build(mc.run_config(pp=2, vpp=2), "copying"))
        out["vpp2_copying"] = {
            "step": mc.train_step(ctx.runtime, 4),
            "bound": ctx.last("callbacks_bound"),
            "built": ctx.last("model_built"),
        }
    with mc.parallel(tp=2):
        ctx = mc.bind(mc.build(mc.run_config(tp=2)))
        out["tp2"] = {"step": mc.train_step(ctx.runtime, 3), "tp_size": ps.get_tensor_model_parallel_world_size()}
    with mc.parallel():
        ctx = mc.bind(mc.build(mc.run_config(ddp={"use_distributed_optimizer": True})))
        out["distopt"] = {"step": mc.train_step(ctx.runtime, 3), "optimizers": _optimizer_types(ctx.runtime.optimizer)}
    return out


def _optimizer_types(optimizer: Any) -> list[str]:
    return sorted({type(o).__name__ for o in getattr(optimizer, "chained_optimizers", [optimizer])})


def _inference() -> dict[str, Any]:
    import megatron_cases as mc

    from lifecycle.core_entry import model_built
    from states import Plan

    with mc.parallel():
        ctx = mc.build(mc.run_config(), "gpt", Plan.INFERENCE)
        rt = ctx.runtime
        out = {
            "optimizer": rt.optimizer,
            "ddp_config": rt.ddp_config,
            "wrapper": type(rt.model[0]).__name__,
            "training_mode": rt.model[0].training,
            "event": ctx.last("model_built"),
        }
        released = model_built.release(ctx, rt)
        out["released"] = (released.model, released.optimizer, released.transformer_config)
    return out


def _chunk_shape(chunk: Any) -> dict[str, Any]:
    model = chunk.module
    return {
        "class": type(model).__name__,
        "pattern": model.hybrid_layer_pattern,
        "layers": "".join(model.decoder.layer_type_list),
        "final_norm": type(getattr(model.decoder, "final_norm", None)).__name__,
        "layer_norm": type(model.decoder.layers[0].input_layernorm).__name__,
        "num_layers": model.config.num_layers,
        "is_hybrid": model.config.is_hybrid_model,
    }


def _stock_final_norm_error() -> str | None:
    """megatron's own HybridStack (TENorm as final norm) on the local layers; its error, if any."""
    import dataclasses

    import megatron_cases as mc
    from megatron.core.models.hybrid.hybrid_block import HybridStack
    from megatron.core.models.hybrid.hybrid_model import HybridModel

    from lifecycle.core_entry.providers import transformer_config
    from lifecycle.testing import local_stack_spec

    spec = dataclasses.replace(local_stack_spec(), module=HybridStack, params={})
    try:
        HybridModel(
            config=transformer_config(mc.run_config(), hybrid=True),
            hybrid_stack_spec=spec,
            vocab_size=mc.VOCAB,
            max_sequence_length=mc.SEQ,
            hybrid_layer_pattern="*-*-",
        )
    except ImportError as exc:
        return str(exc)
    return None


def _hybrid() -> dict[str, Any]:
    """Where megatron-core deprecates GPTModel: the default providers' HybridModel, its steps
    against a GPTModel's on the same run config, and why its stack brings its own final norm."""
    import importlib.util

    import megatron_cases as mc

    from lifecycle.core_entry import compat

    if not compat.gpt_model_deprecated():
        return {}
    out: dict[str, Any] = {}
    with mc.parallel(pp=2, vpp=2):
        out["vpp"] = [_chunk_shape(c) for c in mc.build(mc.run_config(pp=2, vpp=2), "gpt").runtime.model]
    for name, provider in (("hybrid", "gpt"), ("gpt", RecordingProvider())):
        with mc.parallel():
            rt = mc.bind(mc.build(mc.run_config(), provider)).runtime
            out[name] = {
                "class": type(rt.model[0].module).__name__,
                "params": sum(p.numel() for p in rt.model[0].parameters()),
                "losses": [mc.train_step(rt, 2)["losses"] for _ in range(3)],
            }
    if importlib.util.find_spec("transformer_engine") is None:
        with mc.parallel():
            out["stock_final_norm"] = _stock_final_norm_error()
    return out


def _all() -> dict[str, Any]:
    import megatron_cases as mc

    with mc.rehearsal_group():
        return {
            "stages": _stages(),
            "schedules": _schedules(),
            "runs": _runs(),
            "inference": _inference(),
            "hybrid": _hybrid(),
        }


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    return run_ranks(_all, 2)


def test_provider_is_called_once_per_chunk_with_megatrons_stage_flags(
    ranks: list[dict[str, Any]],
) -> None:
    assert [r["stages"]["pp1"]["calls"] for r in ranks] == [[(True, True, None)]] * 2
    assert [r["stages"]["pp2"]["calls"] for r in ranks] == [[(True, False, None)], [(False, True, None)]]
    assert [r["stages"]["pp2_vpp2"]["calls"] for r in ranks] == [
        [(True, False, 0), (False, False, 1)],
        [(False, False, 0), (False, True, 1)],
    ]
    assert [r["stages"]["pp2_vpp2"]["event"]["chunks"] for r in ranks] == [2, 2]


@pytest.mark.parametrize("forward_only", [False, True])
@pytest.mark.parametrize("microbatches", [1, 3])
@pytest.mark.parametrize("pp", [1, 2])
def test_megatrons_schedule_calls_the_bound_finalizer_once_per_training_step(
    ranks: list[dict[str, Any]], pp: int, microbatches: int, forward_only: bool
) -> None:
    schedule = "forward_backward_no_pipelining" if pp == 1 else ("forward_backward_pipelining_without_interleaving")
    for result in ranks:
        step = result["schedules"][(pp, microbatches, forward_only)]
        assert step["schedule"] == schedule
        assert step["finalizer_calls"] == (0 if forward_only else 1)


def test_copying_provider_with_two_virtual_stages_trains_through_the_interleaved_schedule(
    ranks: list[dict[str, Any]],
) -> None:
    for result in ranks:
        case = result["runs"]["vpp2_copying"]
        assert case["step"]["schedule"] == "forward_backward_pipelining_with_interleaving"
        assert case["step"]["finalizer_calls"] == 1 and case["step"]["step_ok"]
        assert case["bound"]["copied"] and case["bound"]["chunks"] == 2
        built = case["built"]
        assert built["model_config_id"] != built["provider_config_id"]
        assert built["model_config_id"] == case["bound"]["target_id"]
    losses = ranks[1]["runs"]["vpp2_copying"]["step"]["losses"]  # the last stage has losses
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses)


def test_tensor_parallel_run_steps_with_identical_losses_on_both_tp_ranks(
    ranks: list[dict[str, Any]],
) -> None:
    steps = [r["runs"]["tp2"]["step"] for r in ranks]
    assert [r["runs"]["tp2"]["tp_size"] for r in ranks] == [2, 2]
    assert all(s["finalizer_calls"] == 1 and s["step_ok"] for s in steps)
    assert steps[0]["losses"] == steps[1]["losses"]


def test_distributed_optimizer_is_built_and_steps(ranks: list[dict[str, Any]]) -> None:
    for result in ranks:
        case = result["runs"]["distopt"]
        assert case["optimizers"] == ["DistributedOptimizer"]
        assert case["step"]["finalizer_calls"] == 1 and case["step"]["step_ok"]


def test_inference_plan_builds_the_model_without_ddp_or_optimizer(
    ranks: list[dict[str, Any]],
) -> None:
    case = ranks[0]["inference"]
    assert case["optimizer"] is None and case["ddp_config"] is None
    assert case["wrapper"] == _default_model() and case["training_mode"] is False
    assert case["event"]["optimizer"] is False
    assert case["released"] == (None, None, None)


def _default_model() -> str:
    from lifecycle.core_entry.compat import gpt_model_deprecated

    return "HybridModel" if gpt_model_deprecated() else "GPTModel"


def _hybrid_case(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not ranks[0]["hybrid"]:
        pytest.skip("megatron-core before 0.19: GPTModel is current, the default providers build it")
    return [r["hybrid"] for r in ranks]


def test_default_provider_splits_each_gpt_block_into_attention_and_mlp_layers_per_pipeline_segment(
    ranks: list[dict[str, Any]],
) -> None:
    """pp=2, vpp=2, 4 GPT blocks: 8 hybrid layers `*-|*-|*-|*-`, one segment per chunk, in
    megatron's virtual-pipeline order; the last chunk ends in the local final norm."""
    cases = _hybrid_case(ranks)
    for rank, case in enumerate(cases):
        assert [c["class"] for c in case["vpp"]] == ["HybridModel"] * 2
        assert {c["pattern"] for c in case["vpp"]} == {"*-|*-|*-|*-"}
        assert [c["layers"] for c in case["vpp"]] == ["*-", "*-"]
        assert {(c["num_layers"], c["is_hybrid"]) for c in case["vpp"]} == {(8, True)}
        norms = [c["final_norm"] for c in case["vpp"]]
        assert norms == (["NoneType", case["vpp"][0]["layer_norm"]] if rank == 1 else ["NoneType"] * 2)


def test_hybrid_model_trains_exactly_as_the_gpt_model_it_replaces(ranks: list[dict[str, Any]]) -> None:
    """The migration guide's check for an architecture-preserving `*-` migration: same parameter
    count, same losses step after step (same initialization order, same computation)."""
    for case in _hybrid_case(ranks):
        assert (case["hybrid"]["class"], case["gpt"]["class"]) == ("HybridModel", "GPTModel")
        assert case["hybrid"]["params"] == case["gpt"]["params"]
        assert case["hybrid"]["losses"] == case["gpt"]["losses"]
        assert len({tuple(step) for step in case["hybrid"]["losses"]}) == 3  # the steps train


def test_megatrons_own_hybrid_stack_needs_transformer_engine_for_its_final_norm(
    ranks: list[dict[str, Any]],
) -> None:
    """Why `_hybrid.local_final_norm_stack` exists: HybridStack builds its final norm as TENorm whatever
    the spec says. When this fails, megatron builds it from the spec: drop that subclass."""
    case = _hybrid_case(ranks)[0]
    if "stock_final_norm" not in case:
        pytest.skip("transformer-engine is installed")
    assert "Transformer Engine is not installed" in (case["stock_final_norm"] or "")
