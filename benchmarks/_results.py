"""`record`: a benchmark run with `--record` writes its figures into benchmarks/results.toml, then the
table of docs/benchmarks.md (benchmarks/results_table.py).

    if args.record:
        from _results import record, spread

        record("launch", spread("wall", walls, "_s") | {"cpu_s": ...})

The entry of that name is rewritten: its figures, the command (this process's, less `--record`), the
machine, the environment, the load, the date and the commit; what it measures, its target and `shows` are kept.
A figure `shows` names and the run did not give is refused before anything is written.
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import results_table  # a benchmark runs as `python benchmarks/NAME.py`: this folder is on sys.path

KEPT = ("name", "script", "measures", "target", "shows")
WHERE = ("machine", "environment", "load", "date", "commit")  # where and when the figures were measured
ORDER = ("name", "script", "command", "measures", "target", "shows", "figures", *WHERE)


def command(argv: list[str] | None = None) -> str:
    """`python benchmarks/NAME.py` and the flags this process was given, less `--record`."""
    argv = sys.argv if argv is None else argv
    return " ".join([f"python benchmarks/{Path(argv[0]).name}", *(a for a in argv[1:] if a != "--record")])


def machine() -> str:
    gpu = "an NVIDIA GPU" if Path("/dev/nvidia0").exists() else "no GPU"
    return f"{os.cpu_count()} CPUs ({platform.machine()}), {gpu}"


def environment() -> str:
    found = [f"Python {platform.python_version()}"]
    for name in ("torch", "megatron-core", "nvidia-resiliency-ext"):
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return ", ".join(found)


def spread(key: str, values: list[float], unit: str = "") -> dict[str, float]:
    """The median of `values` as KEY, the lowest as KEY_min, the highest as KEY_max (each + `unit`)."""
    return {f"{key}{unit}": statistics.median(values), f"{key}_min{unit}": min(values), f"{key}_max{unit}": max(values)}


def commit() -> str:
    """The checkout's commit, `-dirty` when its files differ from it; "unknown" outside a git checkout."""
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=results_table.ROOT, capture_output=True, text=True
        )
    except OSError:  # no git
        return "unknown"
    return done.stdout.strip() or "unknown"


def _rounded(value: Any) -> Any:
    return float(f"{value:.4g}") if isinstance(value, float) else value


def record(
    name: str,
    figures: dict[str, Any],
    command_line: str | None = None,
    results: Path = results_table.RESULTS,
    doc: Path | None = results_table.DOC,
) -> None:
    """Rewrite the entry `name` of `results` with these figures, keep every other entry as it is, then
    write the table into `doc` (none: no page)."""
    entries = results_table.load(results)
    found = [i for i, e in enumerate(entries) if e["name"] == name]
    if not found:
        raise ValueError(f"benchmarks/results.toml has no entry {name!r}: add it (measures, target, shows) first")
    old = entries[found[0]]
    fresh = {key: old[key] for key in KEPT} | {
        "command": command_line or command(),
        "figures": {key: _rounded(value) for key, value in figures.items()},
        "machine": machine(),
        "environment": environment(),
        "load": f"{os.getloadavg()[0]:.1f}",
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "commit": commit(),
    }
    new = {key: fresh[key] for key in ORDER}  # the old note spoke of the old figures: it goes
    results_table.result(new)  # a figure `shows` names and the run lacks: refused, nothing written
    entries[found[0]] = new
    results.write_text(results_table.dump(entries))
    if doc is not None:
        results_table.write(results, doc)
    print(f"recorded in {results.name}: {name}")
