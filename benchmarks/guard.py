"""Cost of `bindings.guard_first_step` per training step, as a ratio to the step it guards.

    python benchmarks/guard.py [--rounds 9] [--block 5]

A tiny GPT (the `tiny-gpt` preset, 1 CPU rank, gloo) trains through megatron's schedule and the
lifecycle's optimizer (`train_steps`). Each round runs a block of steps without the guard and a
block with it, in alternating order; the guard is armed for every step of its block (`steps` =
the block), the worst case: by default it checks the first step only and then takes its wrappers
off. Printed: the median step time of each condition (medians of the rounds' medians, with the
spread over rounds), the median of the rounds' ratios (guarded / bare), and the guard's own work per
step measured alone (the counting wrapper around the finalizer plus the check in the optimizer's
step, around no-op callables) as a fraction of the median step. torch runs on 1 thread, to keep a
shared machine's noise down. Target: under 1 % of a step.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _lifecycle() -> Any:
    from lifecycle import Lifecycle, RunConfig
    from lifecycle.launchers.local import free_port
    from lifecycle.testing import torchrun_env
    from states import State

    os.environ.update(torchrun_env(rank=0, world_size=1, master_addr="127.0.0.1", master_port=free_port()))
    lc = Lifecycle(RunConfig.preset("tiny-gpt", ["parallel.world_size=1"]), "gpt", tripwires="off")
    lc.advance_to(State.CALLBACKS_BOUND)
    return lc


def _block(lc: Any, steps: int, guarded: bool) -> list[float]:
    from bindings import guard_first_step
    from lifecycle.core_entry.train import train_steps

    guard = guard_first_step(list(lc.runtime.model), lc.runtime.optimizer, steps=steps) if guarded else None
    durations = [r.duration_s for r in train_steps(lc, steps)]
    if guard is not None and guard.armed:
        raise AssertionError("the guard did not check every step of its block")
    return durations


def _guard_alone(calls: int) -> float:
    """Seconds per step of the guard's own work, around no-op callables."""
    from types import SimpleNamespace

    from lifecycle.testing import FirstStepGuard

    class Optimizer:
        def step(self) -> None:
            """No work: only the guard's wrapper is timed."""

    config = SimpleNamespace(finalize_model_grads_func=lambda *a: None)
    bare, opt = config.finalize_model_grads_func, Optimizer()
    plain = Optimizer()
    guard = FirstStepGuard(config, opt, steps=calls + 1, emit=lambda *a, **k: None)
    fin, step = config.finalize_model_grads_func, opt.step
    start = time.perf_counter()
    for _ in range(calls):
        fin()
        step()
    guarded = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(calls):
        bare()
        plain.step()
    unguarded = time.perf_counter() - start
    guard.disarm()
    return (guarded - unguarded) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--block", type=int, default=5)
    parser.add_argument("--record", action="store_true", help="write the figures to benchmarks/results.toml")
    args = parser.parse_args()
    import warnings

    warnings.simplefilter("ignore")
    import torch

    torch.set_num_threads(1)  # less noise from a shared machine's other work
    lc = _lifecycle()
    _block(lc, 2, False)  # warm-up: first-step work, allocator, caches
    medians: dict[bool, list[float]] = {False: [], True: []}
    for n in range(args.rounds):
        for guarded in (False, True) if n % 2 == 0 else (True, False):
            medians[guarded].append(statistics.median(_block(lc, args.block, guarded)))
    lc.shutdown()
    alone = statistics.median(_guard_alone(20_000) for _ in range(5))
    step = statistics.median(medians[False])
    for guarded in (False, True):
        values = medians[guarded]
        print(
            f"{'guarded' if guarded else 'bare':>8}: median step {statistics.median(values) * 1e3:8.2f} ms "
            f"(rounds: {min(values) * 1e3:.2f}–{max(values) * 1e3:.2f} ms, {len(values)} x {args.block} steps)"
        )
    ratios = [g / b for g, b in zip(medians[True], medians[False], strict=True)]
    print(
        f"   ratio: guarded / bare, median of the rounds' ratios {statistics.median(ratios):.4f} "
        f"(rounds: {min(ratios):.4f}–{max(ratios):.4f}; the spread is the machine's noise)"
    )
    print(f"   guard alone: {alone * 1e6:.2f} µs per step = {alone / step * 100:.4f} % of the median step")
    if args.record:
        from _results import record, spread

        figures = {"alone_us": alone * 1e6, "percent": alone / step * 100, "step_ms": step * 1e3}
        record("guard", figures | spread("ratio", ratios))


if __name__ == "__main__":
    main()
