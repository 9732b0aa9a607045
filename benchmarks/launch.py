"""Time to the first error of a bad `lifecycle run --nproc 2`: the config is checked in the launching
process, before torchrun starts any rank, so no rank imports torch or megatron.

    python benchmarks/launch.py [--runs 9]

Prints the median and the spread (min–max) of wall time from process start to exit for
`lifecycle run --nproc 2 --set parallel.tp=3` (exit 1, problems printed once), beside a bare
`python -c pass` on the same machine, the CPU time the failing command used (which a loaded machine
inflates less than wall time), and the ratio of the wall-time median to the 1 s target (≤ 1 passes).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BAD_LAUNCH = ["-m", "lifecycle", "run", "--nproc", "2", "--set", "parallel.tp=3"]
TARGET_S = 1.0


def _times(argv: list[str], runs: int, expect: int) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds of the child) per run."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    wall, cpu = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True)
        wall.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        if done.returncode != expect:
            raise SystemExit(f"expected exit {expect}, got {done.returncode}: {done.stderr[-500:]}")
    return wall, cpu


def _line(name: str, times: list[float]) -> str:
    return (
        f"{name:<52} median {statistics.median(times):6.3f} s   spread {min(times):6.3f}–{max(times):6.3f} s"
        f"   ({len(times)} runs)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--record", action="store_true", help="write the figures to benchmarks/results.toml")
    args = parser.parse_args()
    bare, _ = _times(["-c", "pass"], args.runs, 0)
    bad, bad_cpu = _times(BAD_LAUNCH, args.runs, 1)
    print(_line("python -c pass (wall)", bare))
    print(_line("lifecycle run --nproc 2 --set parallel.tp=3 (wall)", bad))
    print(_line("  the same, CPU time (less the machine's load)", bad_cpu))
    print(
        f"time to first error / 1 s target: {statistics.median(bad) / TARGET_S:.2f} (≤ 1 passes); "
        f"over a bare interpreter: {statistics.median(bad) - statistics.median(bare):.3f} s"
    )
    if args.record:
        from _results import record, spread

        record("launch", spread("wall", bad, "_s") | spread("cpu", bad_cpu, "_s"))


if __name__ == "__main__":
    main()
