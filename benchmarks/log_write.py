"""Benchmark the startup log's per-record write cost: a typed record (`AuditLog.write(StepCompleted(...))`,
what the packages write) against the same record by name (`AuditLog.emit(event,
**fields)`, the older way), in memory (no file: the chain, the JSON and the hash).

Prints microseconds of CPU time per record for each, the median over `--runs` runs taken in turn
(typed, by name, typed, ...), with the lowest and highest, their ratio, and the load average.

    python benchmarks/log_write.py [--runs 9] [--records 20000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lifecycle.log import AuditLog, events, records


def typed(log: AuditLog, i: int) -> None:
    log.write(records.StepCompleted(step=i, loss=2.5, duration_s=0.01))
    log.write(
        records.TransitionCompleted(
            trigger="validate", source="CONFIGURED", dest="VALIDATED", duration_s=0.2, config_fingerprint="abc"
        )
    )


def by_name(log: AuditLog, i: int) -> None:
    log.emit(events.STEP_COMPLETED, step=i, loss=2.5, duration_s=0.01)
    log.emit(
        events.TRANSITION_COMPLETED,
        trigger="validate",
        source="CONFIGURED",
        dest="VALIDATED",
        duration_s=0.2,
        config_fingerprint="abc",
    )


def per_record_us(write: Callable[[AuditLog, int], None], n: int) -> float:
    log = AuditLog(run_id="r", rank=0, world_size=8)
    start = time.process_time()
    for i in range(n):
        write(log, i)
    return (time.process_time() - start) / (2 * n) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--record", action="store_true", help="write the figures to benchmarks/results.toml")
    args = parser.parse_args()
    os.environ.pop("LIFECYCLE_STRICT_RECORDS", None)  # by name unchecked, as in a user's process
    load = os.getloadavg()[0]
    runs: dict[str, list[float]] = {"typed": [], "by name": []}
    for _ in range(args.runs):
        runs["typed"].append(per_record_us(typed, args.records))
        runs["by name"].append(per_record_us(by_name, args.records))
    for name, values in runs.items():
        print(f"{name}: {statistics.median(values):.2f} us/record CPU (min {min(values):.2f}, max {max(values):.2f})")
    ratio = statistics.median(runs["typed"]) / statistics.median(runs["by name"])
    print(f"typed / by name: {ratio:.3f} (load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end)")
    if args.record:
        from _results import record

        medians = {name.replace(" ", "_") + "_us": statistics.median(values) for name, values in runs.items()}
        record("log_write", {"ratio": ratio} | medians)


if __name__ == "__main__":
    main()
