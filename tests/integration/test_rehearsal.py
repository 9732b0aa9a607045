"""CPU rehearsal: real megatron-core CUDA paths on gloo, and every patch undone afterwards.

One spawned group of 2 ranks runs all megatron checks to pay the megatron import once.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from lifecycle.errors import RehearsalError
from lifecycle.launchers.local import run_ranks

SEQ, MBS, VOCAB = 16, 2, 128


def _tiny_config(**extra: Any) -> Any:
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(
        num_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        use_cpu_initialization=True,
        params_dtype=torch.float32,
        pipeline_dtype=torch.float32,
        **extra,
    )


def _gpt(config: Any, pre: bool = True, post: bool = True) -> Any:
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    return GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_local_spec(),
        vocab_size=VOCAB,
        max_sequence_length=SEQ,
        pre_process=pre,
        post_process=post,
    )


def _batches(n: int, seed: int) -> list[dict[str, Any]]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        tokens = torch.randint(0, VOCAB, (MBS, SEQ), generator=gen)
        out.append(
            {
                "tokens": tokens,
                "labels": torch.roll(tokens, -1, 1),
                "position_ids": torch.arange(SEQ).unsqueeze(0).expand(MBS, SEQ),
            }
        )
    return out


def _forward_step(data_iterator: Any, model: Any) -> tuple[Any, Any]:
    batch = next(data_iterator)
    losses = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])

    def loss_func(output: Any) -> tuple[Any, dict[str, Any]]:
        loss = output.float().mean()
        return loss, {"loss": loss.detach().clone()}

    return losses, loss_func


def _wrap(config: Any, model: Any) -> tuple[Any, Any]:
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    ddp_config = DistributedDataParallelConfig(
        use_distributed_optimizer=True, overlap_grad_reduce=False, grad_reduce_in_fp32=True
    )
    ddp = DistributedDataParallel(config=config, ddp_config=ddp_config, module=model)
    opt = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-2, use_distributed_optimizer=True, bf16=False),
        [ddp],
    )
    return ddp, opt


def _train_step(config: Any, ddp: Any, opt: Any, seed: int) -> dict[str, Any]:
    import torch
    from megatron.core.distributed import finalize_model_grads
    from megatron.core.pipeline_parallel import get_forward_backward_func

    calls = []

    def counting_finalize(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return finalize_model_grads(*args, **kwargs)

    config.finalize_model_grads_func = counting_finalize
    config.no_sync_func = ddp.no_sync
    before = [p.detach().clone() for p in ddp.parameters()]
    ddp.zero_grad_buffer()
    opt.zero_grad()
    fwd_bwd = get_forward_backward_func()
    losses = fwd_bwd(
        forward_step_func=_forward_step,
        data_iterator=iter(_batches(3, seed)),
        model=[ddp],
        num_microbatches=3,
        seq_length=SEQ,
        micro_batch_size=MBS,
        forward_only=False,
    )
    ok, grad_norm, _ = opt.step()
    changed = sum(int(not torch.equal(b, p.detach())) for b, p in zip(before, ddp.parameters(), strict=True))
    return {
        "schedule": fwd_bwd.__name__,
        "finalize_calls": len(calls),
        "step_ok": bool(ok),
        "grad_norm": float(grad_norm),
        "losses": [float(x["loss"]) for x in losses],
        "params_changed": changed,
        "params": sum(1 for _ in ddp.parameters()),
        "checksum": float(sum(p.detach().double().sum() for p in ddp.parameters())),
    }


def _rehearsal_checks() -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import random as mrandom
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    from lifecycle.core_entry import rehearsal

    targets = [
        (torch.Tensor, "cuda"),
        (torch.Tensor, "type"),
        (mrandom, "_get_cuda_rng_state"),
        (mrandom, "_set_cuda_rng_state"),
    ]
    targets += [
        (torch.cuda, n)
        for n in (
            "current_device",
            "synchronize",
            "empty_cache",
            "Stream",
            "Event",
            "stream",
            "device",
            "current_stream",
            "default_stream",
            "get_rng_state",
            "set_rng_state",
            "manual_seed",
            "nvtx",
        )
    ]
    originals = [getattr(o, n) for o, n in targets]
    out: dict[str, Any] = {}
    dist.init_process_group("gloo")
    with rehearsal.cpu_rehearsal() as reh:
        out["patched"] = list(reh.patched)
        out["device_rewritten"] = str(torch.ones(2, device="cuda").device)
        out["int_device_rewritten"] = str(torch.empty(1, device=0).device)
        out["to_cuda"] = str(torch.ones(1).to("cuda:1").device)
        out["cuda_noop"] = str(torch.ones(1).cuda().device)
        out["type_name"] = torch.ones(1).type()
        parallel_state.initialize_model_parallel(1, 1)
        model_parallel_cuda_manual_seed(1234)
        out["dp"] = parallel_state.get_data_parallel_world_size()
        config = _tiny_config()
        ddp, opt = _wrap(config, _gpt(config))
        inner = getattr(opt, "chained_optimizers", [opt])
        out["optimizer"] = sorted({type(o).__name__ for o in inner})
        out["no_pp"] = _train_step(config, ddp, opt, seed=dist.get_rank())
        parallel_state.destroy_model_parallel()
        out["pp2"] = _pp2_step()
        parallel_state.destroy_model_parallel()
        out["tp2"] = _tp2_step()
        parallel_state.destroy_model_parallel()
    out["restored"] = all(getattr(o, n) is v for (o, n), v in zip(targets, originals, strict=True))
    try:
        torch.ones(1, device="cuda")
        out["cuda_device_after"] = "created"
    except (RuntimeError, AssertionError) as exc:
        out["cuda_device_after"] = type(exc).__name__
    out["type_after"] = torch.ones(1).type()
    dist.destroy_process_group()
    return out


def _pp2_step() -> dict[str, Any]:
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    parallel_state.initialize_model_parallel(1, 2)
    model_parallel_cuda_manual_seed(1234)
    config = _tiny_config(pipeline_model_parallel_size=2)
    pre = parallel_state.is_pipeline_first_stage()
    post = parallel_state.is_pipeline_last_stage()
    ddp, opt = _wrap(config, _gpt(config, pre=pre, post=post))
    result = _train_step(config, ddp, opt, seed=7)
    result["stage"] = parallel_state.get_pipeline_model_parallel_rank()
    return result


def _tp2_step() -> dict[str, Any]:
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    parallel_state.initialize_model_parallel(2, 1)
    model_parallel_cuda_manual_seed(1234)
    config = _tiny_config(tensor_model_parallel_size=2)
    ddp, opt = _wrap(config, _gpt(config))
    result = _train_step(config, ddp, opt, seed=11)
    result["tp_rank"] = parallel_state.get_tensor_model_parallel_rank()
    result["local_heads"] = ddp.module.decoder.layers[0].self_attention.num_attention_heads_per_partition
    return result


@pytest.fixture(scope="module")
def two_ranks() -> list[dict[str, Any]]:
    return run_ranks(_rehearsal_checks, 2, timeout_s=300)


pytestmark = pytest.mark.slow


def test_cuda_devices_and_int_devices_become_cpu_inside_the_rehearsal(
    two_ranks: list[dict[str, Any]],
) -> None:
    for r in two_ranks:
        assert r["device_rewritten"] == r["int_device_rewritten"] == r["to_cuda"] == "cpu"
        assert r["cuda_noop"] == "cpu"
        assert r["type_name"] == "torch.cuda.FloatTensor"


def test_no_pipelining_schedule_runs_ddp_distributed_optimizer_and_finalize_on_gloo(
    two_ranks: list[dict[str, Any]],
) -> None:
    for r in two_ranks:
        step = r["no_pp"]
        assert r["dp"] == 2
        assert r["optimizer"] == ["DistributedOptimizer"]
        assert step["schedule"] == "forward_backward_no_pipelining"
        assert step["finalize_calls"] == 1
        assert step["step_ok"] and step["grad_norm"] > 0
        assert len(step["losses"]) == 3
        assert step["params_changed"] == step["params"]
    # different data per rank, but DDP + the distributed optimizer keep the replicas identical
    assert two_ranks[0]["no_pp"]["losses"] != two_ranks[1]["no_pp"]["losses"]
    assert two_ranks[0]["no_pp"]["checksum"] == pytest.approx(two_ranks[1]["no_pp"]["checksum"], rel=1e-9)


def test_pp2_one_f_one_b_schedule_trains_both_stages_of_a_gpt_model(
    two_ranks: list[dict[str, Any]],
) -> None:
    stages = sorted(r["pp2"]["stage"] for r in two_ranks)
    assert stages == [0, 1]
    for r in two_ranks:
        step = r["pp2"]
        assert step["schedule"] == "forward_backward_pipelining_without_interleaving"
        assert step["finalize_calls"] == 1
        assert step["step_ok"] and step["params_changed"] == step["params"]
    last = next(r["pp2"] for r in two_ranks if r["pp2"]["stage"] == 1)
    assert len(last["losses"]) == 3


def test_tp2_gpt_model_splits_heads_and_trains_identically_on_both_tensor_ranks(
    two_ranks: list[dict[str, Any]],
) -> None:
    assert sorted(r["tp2"]["tp_rank"] for r in two_ranks) == [0, 1]
    for r in two_ranks:
        step = r["tp2"]
        assert step["local_heads"] == 2
        assert step["finalize_calls"] == 1 and step["step_ok"]
    # same data on both TP ranks: the losses agree (they are computed over the gathered vocab)
    assert two_ranks[0]["tp2"]["losses"] == pytest.approx(two_ranks[1]["tp2"]["losses"], rel=1e-6)


def test_every_patch_is_undone_on_exit(two_ranks: list[dict[str, Any]]) -> None:
    for r in two_ranks:
        assert r["restored"] is True
        assert r["type_after"] == "torch.FloatTensor"
        assert r["cuda_device_after"] != "created"
        assert "Tensor.cuda" in r["patched"] and "random._get_cuda_rng_state" in "|".join(r["patched"])


def test_rehearsals_do_not_nest_and_must_close_on_their_thread() -> None:
    import torch

    from lifecycle.core_entry import rehearsal

    original = torch.Tensor.cuda
    with rehearsal.cpu_rehearsal() as outer:
        with pytest.raises(RehearsalError, match="already active"):
            rehearsal.start_rehearsal()
        errors: list[BaseException] = []
        thread = threading.Thread(target=lambda: _close_into(outer, errors))
        thread.start()
        thread.join()
        assert isinstance(errors[0], RehearsalError)
        assert outer.active
    assert not outer.active and torch.Tensor.cuda is original
    outer.close()  # idempotent


def _close_into(reh: Any, errors: list[BaseException]) -> None:
    try:
        reh.close()
    except BaseException as exc:
        errors.append(exc)
