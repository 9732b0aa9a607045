"""Cost of the resume window (`lifecycle.resume.streams`): hashing every random stream and wrapping the
draw and seed entry points after a checkpoint load, then hashing them again and taking the wrappers off
at the first step, against that first step.

    python benchmarks/resume_window.py [--rounds 5] [--repeat 50]

2 gloo ranks (spawned, the CPU rehearsal), tiny-gpt with tp=2: a save at step 2, then `--rounds`
resumes, each training one step. From each rank's log: the check's own `duration_s` (`streams_checked`)
and the first step's (`step_completed`). Then, on the resumed model, open + check alone `--repeat` times
for a steady figure of the whole window, and again with a DataLoader given (`watch_data`: its generator,
its dataset's NumPy Generator and RandomState). Printed: medians over rounds and ranks, the spread (min-max),
the ratio window / first step, and the load average. Target: under 1 % of the first step.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TINY = ["parallel.tp=2", "model.num_layers=2", "model.hidden_size=32", "model.num_attention_heads=4"]


def _durations(log: Path) -> tuple[float, float]:
    import orjson

    records = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    check = next(r["duration_s"] for r in records if r["event"] == "streams_checked")
    step = next(r["duration_s"] for r in records if r["event"] == "step_completed")
    return float(check), float(step)


class _Augmented:
    """A dataset with a NumPy generator and a legacy RandomState of its own (the window swaps both)."""

    def __init__(self) -> None:
        import numpy

        self.rng = numpy.random.default_rng(5)
        self.legacy = numpy.random.RandomState(6)

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> float:
        return index + float(self.rng.random())


def _alone(repeat: int, data: bool) -> float:
    """open + check, the whole window's own work, `repeat` times: the median. With `data`, a shuffling
    DataLoader with its own generator over `_Augmented` is given too (`watch_data`: 3 data streams)."""
    import torch

    from lifecycle.resume.streams import ResumeWindow

    loader = torch.utils.data.DataLoader(
        _Augmented(), batch_size=2, shuffle=True, generator=torch.Generator().manual_seed(1)
    )
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        window = ResumeWindow.open(2)
        if data:
            window.watch_data(loader)
        window.check(3)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def rank_work(root: str, rounds: int, repeat: int) -> list[tuple[float, float, float, float]]:
    from lifecycle import Lifecycle, RunConfig
    from lifecycle.core_entry.train import save_after_steps, train_steps
    from states import State

    with Lifecycle(RunConfig.preset("tiny-gpt", [*TINY, f"checkpoint.save={root}/ck"]), "gpt", f"{root}/save") as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        train_steps(lc, 2)
        save_after_steps(lc, 2)
    out = []
    for round_ in range(rounds):
        config = RunConfig.preset("tiny-gpt", [*TINY, f"checkpoint.load={root}/ck"])
        with Lifecycle(config, "gpt", tempfile.mkdtemp(prefix=f"bench-resume-{round_}-")) as lc:
            lc.advance_to(State.CALLBACKS_BOUND)
            train_steps(lc, 1)
            alone, data = _alone(repeat, data=False), _alone(repeat, data=True)
            log = lc.log_path
        check, step = _durations(Path(str(log)))
        out.append((check, step, alone, data))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    from lifecycle.launchers.local import run_ranks

    load = os.getloadavg()[0]
    root = tempfile.mkdtemp(prefix="bench-resume-")
    ranks = run_ranks(rank_work, 2, root, args.rounds, args.repeat, timeout_s=1800)
    rows = [row for rank in ranks for row in rank]
    check = [r[0] * 1e3 for r in rows]
    step = [r[1] * 1e3 for r in rows]
    alone = [r[2] * 1e3 for r in rows]
    data = [r[3] * 1e3 for r in rows]
    print(f"resume window, 2 ranks, tiny-gpt tp=2, {args.rounds} rounds; load {load:.2f}")
    shown = (
        ("check at the first step", check),
        ("open + check alone", alone),
        ("open + watch_data (3 data streams) + check", data),
        ("first step", step),
    )
    for label, values in shown:
        spread = f"{min(values):.3f}-{max(values):.3f}"
        print(f"{label}: median {statistics.median(values):.3f} ms (spread {spread})")
    for label, values in (("window", alone), ("window with data", data)):
        ratio = statistics.median(a / s for a, s in zip(values, step, strict=True))
        print(f"{label} / first step: {ratio:.4f} (target < 0.01)")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
