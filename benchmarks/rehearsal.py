"""2-rank tiny-GPT startup + 3 training steps through the lifecycle, as a ratio to the same work
written as a plain megatron-core script (same CPU rehearsal, same model, data and optimizer).

    python benchmarks/rehearsal.py [--repeats 3]

Each run spawns 2 fresh gloo ranks. Timed per rank from after `import megatron.core` (both pay the
same ~7 s import) to the end of step 3, then the slower rank counts; the end-to-end wall time of the
spawn is printed too. Target: lifecycle / plain ≤ 1.2.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STEPS = 3


def _config() -> Any:
    from lifecycle import RunConfig

    return RunConfig.preset("tiny-gpt")


def lifecycle_rank(log_dir: str) -> float:
    import megatron.core  # noqa: F401  (import cost excluded from the timing, as in the plain script)

    from lifecycle import Lifecycle
    from lifecycle.megatron.train import train_steps
    from states import State

    start = time.perf_counter()
    with Lifecycle(_config(), "gpt", log_dir) as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        train_steps(lc, STEPS)
        elapsed = time.perf_counter() - start
    return elapsed


def plain_rank(_log_dir: str) -> float:
    """What a user writes by hand with megatron-core: no lifecycle, no log, no checks."""
    import megatron.core  # noqa: F401

    start = time.perf_counter()
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.tokenizers import MegatronTokenizer  # noqa: F401  (same import work as the services)
    from megatron.core.transformer import TransformerConfig

    from lifecycle.megatron.rehearsal import cpu_rehearsal
    from lifecycle.megatron.train import _batches, _forward_step

    cfg = _config()
    m = cfg.model
    with cpu_rehearsal():
        dist.init_process_group("gloo", init_method="env://")
        ps.initialize_model_parallel()
        torch.manual_seed(cfg.training.seed)
        model_parallel_cuda_manual_seed(cfg.training.seed)
        tc = TransformerConfig(num_layers=m.num_layers, hidden_size=m.hidden_size,
                               num_attention_heads=m.num_attention_heads, use_cpu_initialization=True,
                               hidden_dropout=0.0, attention_dropout=0.0, init_method_std=m.init_method_std)
        vocab = -(-cfg.tokenizer.vocab_size // m.make_vocab_size_divisible_by) * m.make_vocab_size_divisible_by
        gpt = GPTModel(config=tc, transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=vocab,
                       max_sequence_length=m.seq_length)
        ddp = DistributedDataParallel(tc, DistributedDataParallelConfig(), gpt)
        opt = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=cfg.optimizer.lr), [ddp])
        tc.finalize_model_grads_func = finalize_model_grads
        tc.grad_scale_func = opt.scale_loss
        data = _batches(cfg, vocab, cfg.training.seed)
        schedule = get_forward_backward_func()
        for _ in range(STEPS):
            ddp.zero_grad_buffer()
            opt.zero_grad()
            schedule(forward_step_func=_forward_step, data_iterator=data, model=[ddp],
                     num_microbatches=cfg.training.num_microbatches, seq_length=m.seq_length,
                     micro_batch_size=cfg.training.micro_batch_size, forward_only=False)
            opt.step()
        elapsed = time.perf_counter() - start
        dist.barrier()
        ps.destroy_model_parallel()
        dist.destroy_process_group()
    return elapsed


def _measure(fn: Any, log_dir: str) -> tuple[float, float]:
    from lifecycle.engine.launch import run_ranks

    start = time.perf_counter()
    per_rank = run_ranks(fn, 2, log_dir, timeout_s=600)
    return max(per_rank), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    inner: dict[str, list[float]] = {"lifecycle": [], "plain": []}
    outer: dict[str, list[float]] = {"lifecycle": [], "plain": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for name, fn in (("plain", plain_rank), ("lifecycle", lifecycle_rank)):
                t_in, t_out = _measure(fn, f"{tmp}/{name}{i}")
                inner[name].append(t_in)
                outer[name].append(t_out)
    med = {k: statistics.median(v) for k, v in inner.items()}
    wall = {k: statistics.median(v) for k, v in outer.items()}
    print(f"runs per variant                         : {args.repeats} (2 gloo ranks each, {STEPS} steps)")
    for name in ("plain", "lifecycle"):
        print(f"{name:<22} startup+steps     : {med[name]:.2f} s   (spawn end to end {wall[name]:.1f} s)")
    print(f"ratio lifecycle/plain  startup+steps     : {med['lifecycle'] / med['plain']:.2f}x  (target <= 1.2x)")
    print(f"ratio lifecycle/plain  end to end        : {wall['lifecycle'] / wall['plain']:.2f}x")


if __name__ == "__main__":
    main()
