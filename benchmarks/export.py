"""Benchmark `lifecycle export` and `lifecycle report` at scale: N ranks x ~60 records (the audit
benchmark's logs, with its injected faults).

Prints, as medians over `--repeat` runs with the lowest and highest: the audit's own time, the
Chrome export's and the OTLP export's (each reads the logs and audits them, keeping the details
as the audit decodes each record, then writes the file), and their ratio to the audit run back to
back (target: Chrome < 2x), in wall time and in CPU time (this process and its workers: what a
busy machine's other work does not change); then how long headless Chromium takes to load and
draw the report (target < 5 s), when chromium is here.

    python benchmarks/export.py [--ranks 4096] [--steps 30] [--repeat 3] [--dir DIR] [--no-otlp]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "tests" / "integration")]

from audit import write_run  # noqa: E402

from lifecycle.audit import audit  # noqa: E402
from lifecycle.export import load  # noqa: E402
from lifecycle.testing import write_chrome, write_otlp, write_report  # noqa: E402

CPU: list[float] = []
"""The CPU time of each `_timed` call, in order (the wall time is what it returns)."""


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _timed(fn: object, *args: object) -> float:
    cpu, start = _cpu(), time.perf_counter()
    fn(*args)  # type: ignore[operator]
    wall = time.perf_counter() - start
    CPU.append(_cpu() - cpu)
    return wall


def _spread(values: list[float], unit: str = "s") -> str:
    return f"median {statistics.median(values):.3f}{unit} (min {min(values):.3f}, max {max(values):.3f})"


def _export(log_dir: Path, out: Path, writer: object, jobs: int | None = None) -> None:
    writer(load([str(log_dir)], jobs=jobs), out)  # type: ignore[operator]


def browser_load(page: Path, repeat: int) -> list[float] | None:
    from browser import Browser, chromium

    executable = chromium()
    if executable is None:
        return None
    times = []
    for _ in range(repeat):
        session = Browser(executable)  # a fresh browser each time: nothing cached
        try:
            start = time.perf_counter()
            session.load(page, timeout=60)
            while session.evaluate("document.body.dataset.rendered") != "yes":
                time.sleep(0.01)
            times.append(time.perf_counter() - start)
            if session.errors:
                raise SystemExit(f"the report logged errors: {session.errors[:3]}")
        finally:
            session.close()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--no-otlp", action="store_true")
    parser.add_argument("--record", action="store_true", help="write the figures to benchmarks/results.toml")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="lifecycle-export-bench-"))
    logs = root / f"ranks-{args.ranks}"
    lines = write_run(logs, args.ranks, steps=args.steps)
    print(f"logs: {args.ranks} ranks, {lines} lines, {sum(p.stat().st_size for p in logs.iterdir()) / 2**20:.1f} MiB")
    rows: dict[str, list[float]] = {"audit": [], "chrome": [], "chrome.gz": [], "otlp": []}
    one: dict[str, list[float]] = {"audit": [], "chrome": []}
    cpu: dict[str, list[float]] = {"audit": [], "chrome": [], "audit jobs=1": [], "chrome jobs=1": []}
    for _ in range(args.repeat):
        one["audit"].append(_timed(lambda: audit([str(logs)], jobs=1)))
        one["chrome"].append(_timed(_export, logs, root / "trace.json", write_chrome, 1))
        cpu["audit jobs=1"].append(CPU[-2])
        cpu["chrome jobs=1"].append(CPU[-1])
        rows["audit"].append(_timed(audit, [str(logs)]))
        rows["chrome"].append(_timed(_export, logs, root / "trace.json", write_chrome))
        cpu["audit"].append(CPU[-2])
        cpu["chrome"].append(CPU[-1])
        rows["chrome.gz"].append(_timed(_export, logs, root / "trace.json.gz", write_chrome))
        if not args.no_otlp:
            rows["otlp"].append(_timed(_export, logs, root / "spans.json", write_otlp))
    medians = []  # the CPU-time ratio, default jobs and one process
    for name in ("chrome", "chrome jobs=1"):
        ratios = [c / a for c, a in zip(cpu[name], cpu[name.replace("chrome", "audit")], strict=True)]
        medians.append(statistics.median(ratios))
        print(f"CPU time {name}: {_spread(cpu[name])}; x audit {_spread(ratios, '')}")
    for title, table in (("ONE PROCESS (jobs=1)", one), ("default jobs", rows)):
        print(title)
        for name, values in table.items():
            if not values:
                continue
            ratio = (
                ""
                if name == "audit"
                else "; x audit " + _spread([v / a for v, a in zip(values, table["audit"], strict=True)], "")
            )
            print(f"  {name:<10} {_spread(values)}{ratio}")
    page = write_report(load([str(logs)]), root / "report.html")
    print(f"report: {page.stat().st_size / 2**10:.0f} KiB")
    loads = browser_load(page, args.repeat)
    print(
        "chromium: not installed (scripts/browser-deps)"
        if loads is None
        else f"chromium load+draw {_spread(loads)} (target < 5 s)"
    )
    if args.record:
        if loads is None:
            raise SystemExit("not recorded: chromium is not installed (scripts/browser-deps): no draw time")
        from _results import record

        record(
            "export",
            {"cpu_ratio_low": min(medians), "cpu_ratio_high": max(medians), "draw_s": statistics.median(loads)},
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
