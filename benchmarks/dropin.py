"""Time to the first training step: the example script (`examples/pretrain_gpt_tiny.py`) with
`lifecycle.lm_dropin.pretrain` against Megatron-LM's own `pretrain` (inside the CPU stand-ins the
drop-in also uses), 2 gloo ranks, ABBA order.

    python benchmarks/dropin.py [--runs 4] [--tp 1] [--num-workers 2] [--late]

Each run starts 2 fresh processes; the time is from just before they are spawned to the moment the
later of the two ranks enters Megatron-LM's first `train_step`. Prints medians, spread (min–max) and
the ratio lifecycle / Megatron-LM (goal ≤ 1.0). The data loader runs with Megatron-LM's default
`--num-workers 2` (worker processes forked as under torchrun, pinned memory), unless told otherwise.

`--late` measures instead what resolving Megatron-LM's names late costs (`lifecycle/lm_dropin/entry/_late.py`):
one look-up's time, against the median step of a 5-step drop-in run on 2 ranks (its `step_completed`
records). The drop-in resolves about 20 names once per `pretrain` and at most one per step (the rerun
state machine's RNG-tracker save reads `tensor_parallel` where Megatron-LM's own closure does).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def first_step(which: str, tp: int, log_dir: str, workers: int = 2) -> float:
    """Run the script with `which` pretrain; return the wall-clock time its first train_step began."""
    import multiprocessing

    multiprocessing.set_start_method("fork", force=True)  # torchrun's, for the data loader's workers
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    sys.argv = ["pretrain_gpt_tiny.py"]
    sys.path.insert(0, str(ROOT / "examples"))
    import pretrain_gpt_tiny as script
    from megatron.training import arguments, training

    started: list[float] = []
    original = training.train_step

    def train_step(*args: Any, **kwargs: Any) -> Any:
        started.append(started[0] if started else time.time())
        return original(*args, **kwargs)

    training.train_step = train_step
    argv = ["--tensor-model-parallel-size", str(tp), "--train-iters", "1", "--num-workers", str(workers)]
    if which == "megatron":
        from megatron.training import pretrain

        from lifecycle.testing import cuda_as_cpu

        with cuda_as_cpu():
            script.main(pretrain=pretrain, extra_argv=argv)
    else:
        from functools import partial

        from lifecycle.lm_dropin import pretrain as dropin

        arguments.get_device_arch_version = lambda: 9  # the script's own TP>1 read, before pretrain
        script.main(pretrain=partial(dropin, log_dir=log_dir), extra_argv=argv)
    return started[0]


def one(which: str, tp: int, workers: int) -> float:
    from lifecycle.launchers.local import run_ranks

    with tempfile.TemporaryDirectory() as logs:
        t0 = time.time()
        firsts = run_ranks(first_step, 2, which, tp, logs, workers, timeout_s=600)
    return max(firsts) - t0


def steps(log_dir: str) -> list[float]:
    """A 5-step drop-in run of the example script on this rank (`run_ranks`); its steps' durations."""
    import json
    from functools import partial

    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    sys.argv = ["pretrain_gpt_tiny.py"]
    sys.path.insert(0, str(ROOT / "examples"))
    import pretrain_gpt_tiny as script

    from lifecycle.lm_dropin import pretrain as dropin

    script.main(pretrain=partial(dropin, log_dir=log_dir), extra_argv=["--num-workers", "0"])
    rank = int(os.environ["RANK"])
    lines = (Path(log_dir) / f"rank-{rank:05d}.jsonl").read_text().splitlines()
    return [r["duration_s"] for r in map(json.loads, lines) if r["event"] == "step_completed"]


def late_cost() -> None:
    """One late look-up's time against one step's."""
    import timeit

    import megatron.training.training  # noqa: F401  # the module looked in

    from lifecycle.launchers.local import run_ranks
    from lifecycle.lm_dropin.entry import TRAINING, late

    n = 100_000
    lookup = min(timeit.repeat(lambda: late(TRAINING, "train"), number=n, repeat=5)) / n
    with tempfile.TemporaryDirectory() as logs:
        durations = [d for rank in run_ranks(steps, 2, logs, timeout_s=600) for d in rank[1:]]  # after step 1
    step, low, high = statistics.median(durations), min(durations), max(durations)
    print(f"late look-up {lookup * 1e6:.2f} µs")
    print(f"step median {step * 1e3:.1f} ms (spread {low * 1e3:.1f}–{high * 1e3:.1f} ms, steps 2-5 of 2 ranks)")
    print(f"one look-up per step: {lookup / step:.1e} of a step")


def _line(name: str, times: list[float]) -> str:
    spread = f"{min(times):6.2f}–{max(times):6.2f} s"
    return f"{name:<34} median {statistics.median(times):7.2f} s   spread {spread}   ({len(times)} runs)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=4, help="runs of each (ABBA: an even number)")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--num-workers", type=int, default=2, help="data loader workers (Megatron-LM's default: 2)")
    parser.add_argument("--late", action="store_true", help="measure the late look-ups' cost against a step instead")
    parser.add_argument("--record", action="store_true", help="write the figures to benchmarks/results.toml")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.late:
        late_cost()
        return
    times: dict[str, list[float]] = {"megatron": [], "lifecycle": []}
    for i in range(args.runs):
        order = ("megatron", "lifecycle") if i % 2 == 0 else ("lifecycle", "megatron")
        for which in order:
            times[which].append(one(which, args.tp, args.num_workers))
    print(_line("Megatron-LM pretrain (first step)", times["megatron"]))
    print(_line("lifecycle pretrain (first step)", times["lifecycle"]))
    ratio = statistics.median(times["lifecycle"]) / statistics.median(times["megatron"])
    pairs = [b / a for a, b in zip(times["megatron"], times["lifecycle"], strict=True)]
    print(f"lifecycle / Megatron-LM: {ratio:.3f} (goal ≤ 1.0); per ABBA pair {min(pairs):.3f}–{max(pairs):.3f}")
    if args.record:
        from _results import record

        record("dropin", {"ratio": ratio, "pair_min": min(pairs), "pair_max": max(pairs)})


if __name__ == "__main__":
    main()
