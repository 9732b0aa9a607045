"""Restart cost: time from a fault to the first training step completed after the restart, in place
(nvidia-resiliency-ext's `inprocess.Wrapper`, `lifecycle.resilience`) against a process restart
(torchrun `--max-restarts`), on the same job.

    python benchmarks/restart.py [--faults 4] [--runs 2]

The job: the tiny GPT on 2 gloo ranks (CPU rehearsal), 6 steps, a checkpoint at step 2, rank 1
fails at step 3. In place: one run of `--faults` cycles that fail (`RuntimeError` on rank 1) and a
last clean one, each restart a sample: `cycle_ended.fault_ts` → the first `step_completed` of the
next cycle (the slowest rank), and where it went (`PHASES`). Process restart: `--runs` runs of
`torchrun --max-restarts 1` where rank 1 SIGKILLs itself (the fault time is written just before);
the sample is the fault → the first `step_completed` of attempt 1 (the slowest rank). Prints the
medians, the spread (min–max) and the ratio in place / process restart (goal: ≤ 0.25). Goes in docs/restart.md#cost.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _records(log_dir: Path) -> list[dict[str, Any]]:
    return [
        orjson.loads(line) for path in sorted(log_dir.glob("rank-*.jsonl")) for line in path.read_bytes().splitlines()
    ]


PHASES = ("wrapper", "release", "services", "distributed", "model", "callbacks", "first step")
"""Where an in-place restart's time goes, on each rank: fault → the next call of the wrapper
(`cycle_ended`: detection, the abort, the wrapper's barrier), → VALIDATED (release and the ledger's
check), → each state of the rebuild, → the first step completed."""


def _first(records: list[dict[str, Any]], rank: int, after: float, test: Any) -> float:
    return min(r["ts"] for r in records if r["rank"] == rank and r["ts"] >= after and test(r))


def _phases(records: list[dict[str, Any]], cycle: int, rank: int, fault: float) -> list[float]:
    marks = [fault, _first(records, rank, fault, lambda r: r["event"] == "cycle_ended" and r["cycle"] == cycle - 1)]
    for dest in ("VALIDATED", "SERVICES_READY", "DISTRIBUTED", "MODEL_BUILT", "CALLBACKS_BOUND"):
        marks.append(
            _first(
                records, rank, marks[-1], lambda r, d=dest: r["event"] == "transition_completed" and r.get("dest") == d
            )
        )
    marks.append(_first(records, rank, marks[-1], lambda r: r["event"] == "step_completed" and r["cycle"] == cycle))
    return [b - a for a, b in itertools.pairwise(marks)]


def in_place_samples(root: Path, faults: int) -> tuple[list[float], list[list[float]]]:
    """(fault → first step after the restart, slowest rank; that rank's `PHASES`) per restart."""
    from lifecycle.launchers.local import run_ranks
    from tests.integration.restart_cases import run_case

    run_ranks(run_case, 2, str(root), "inplace", faults, 3, 1, timeout_s=1800)
    records = _records(root / "inplace" / "logs")
    samples, phases = [], []
    for cycle in range(1, faults + 1):
        fault = next(r["fault_ts"] for r in records if r["event"] == "cycle_ended" and r["cycle"] == cycle - 1)
        per_rank = [_phases(records, cycle, rank, fault) for rank in (0, 1)]
        slowest = max(per_rank, key=sum)
        samples.append(sum(slowest))
        phases.append(slowest)
    return samples, phases


def process_samples(root: Path, runs: int) -> list[float]:
    from tests.integration.test_restart_torchrun import torchrun

    samples = []
    for run in range(runs):
        name = f"torchrun-{run}"
        done = torchrun(root, name, "--fault")
        if done.returncode != 0:
            raise SystemExit(f"torchrun run {run} failed:\n{done.stderr[-3000:]}")
        fault = float((root / name / "fault_ts").read_text())
        records = _records(root / name / "logs")
        attempt_start = {r["rank"]: r["seq"] for r in records if r["event"] == "lifecycle_started" and r.get("attempt")}
        first = [
            min(
                r["ts"]
                for r in records
                if r["event"] == "step_completed" and r["rank"] == rank and r["seq"] > attempt_start[rank]
            )
            for rank in (0, 1)
        ]
        samples.append(max(first) - fault)
    return samples


def _line(name: str, samples: list[float]) -> str:
    return (
        f"{name:<22} median {statistics.median(samples):7.2f} s  spread {min(samples):.2f}–{max(samples):.2f} s"
        f"  ({len(samples)} samples)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=4, help="in-place restarts (one run)")
    parser.add_argument("--runs", type=int, default=2, help="torchrun runs (one restart each)")
    parser.add_argument("--record", action="store_true", help="write the figures to benchmarks/results.toml")
    args = parser.parse_args(argv)
    from lifecycle.testing import installed_problem

    problem = installed_problem()
    if problem is not None:
        print(f"skipped: {problem}")
        return 0
    with tempfile.TemporaryDirectory(prefix="restart-bench-") as tmp:
        root = Path(tmp)
        inplace, phases = in_place_samples(root, args.faults)
        process = process_samples(root, args.runs)
    print(_line("in place (nvrx)", inplace))
    for name, values in zip(PHASES, zip(*phases, strict=True), strict=True):
        print(f"  {name:<20} median {statistics.median(values):6.2f} s  spread {min(values):.2f}–{max(values):.2f} s")
    print(_line("torchrun --max-restarts", process))
    ratio = statistics.median(inplace) / statistics.median(process)
    print(f"ratio in place / process restart: {ratio:.3f} (goal <= 0.25)")
    if args.record:
        from _results import record, spread

        record("restart", {"ratio": ratio} | spread("inplace", inplace, "_s") | spread("process", process, "_s"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
