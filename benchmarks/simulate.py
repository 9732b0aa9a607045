"""Time and peak memory per simulated rank of `gpt-4096` (4,096 ranks, TP8 PP4 CP2 EP8), and the
time of `lifecycle simulate --all`.

    python benchmarks/simulate.py [--repeats 5] [--ranks 20] [--until MODEL_BUILT] [--all] [--jobs N]

Each repeat is a fresh process (megatron's import and RankGenerator layout are not timed) that
simulates `--ranks` sampled ranks to DISTRIBUTED and back through the real engine, startup logs
written, and the same ranks with megatron alone (fake process group, `initialize_model_parallel`,
destroy; no lifecycle, no log). Printed: the median time a rank takes (median over repeats of each
repeat's median), the peak resident memory of a process that has simulated one rank, and how much
it grows over the following ranks. Targets: < 1 s and < 500 MB a rank. `--all` then times
`lifecycle simulate --preset gpt-4096 --all` once, end to end (about 17 minutes of CPU), and
the audit of its 4,096 logs.

    python benchmarks/simulate.py --plan-check [--sizes 2,4,8]

checks the model of `lifecycle simulate --plan` here: it runs `lifecycle run --preset tiny-gpt
--steps 1` alone (one rank: the constants), then on 2, 4 and 8 ranks (`--nproc`), and prints per
phase the critical path measured from the startup logs (the last rank to finish each phase) beside
the plan's prediction for that size on this machine's cores, and their ratio (target: within ±25 %).

    python benchmarks/simulate.py --creations [--sizes 4096:64,16384:16,131072:4]

checks `distributed.groups: own` against megatron's own creation at scale: for `gpt-4096`'s layout at
each size, the sampled ranks (`lifecycle simulate --sample K`: first and last ranks of each stage,
then random ones) are initialized on the fake backend under both creations, and every
`parallel_state` global is compared; printed: the ranks compared, the globals that differ (target:
none) and the median CPU seconds of a rank's creation under each.
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one_repeat(log_dir: str, count: int, until: str) -> dict[str, Any]:
    """In a fresh process: simulate `count` ranks with the lifecycle, then with megatron alone."""
    import warnings

    warnings.filterwarnings("ignore")
    from lifecycle import RunConfig
    from lifecycle.simulate import Layout, Simulation, prepare, sample_ranks
    from lifecycle.testing import simulate_rank, warm_up
    from states import State

    overrides = ["parallel.cp=1"] if until == "MODEL_BUILT" else []
    config = prepare(RunConfig.preset("gpt-4096", overrides), until=State[until])
    layout = Layout(config.parallel, 4096)
    ranks = tuple(sample_ranks(layout, count + 1, seed=1))
    warm_up(config)
    base = _rss_mb()
    sim = Simulation(config=config, ranks=ranks, until=State[until], log_dir=log_dir, selection="benchmark")

    def one_rank(rank: int) -> None:
        report = simulate_rank(sim, rank, layout.placement(rank))
        assert report.ok, (rank, report.error, report.mismatches)

    _timed(one_rank, ranks[:1])
    peak_one = _peak_mb()
    lifecycle = _timed(one_rank, ranks[1:])
    plain = _timed(functools.partial(_megatron_alone, config), ranks[1:]) if until == "DISTRIBUTED" else None
    return {"lifecycle": lifecycle, "plain": plain, "base_mb": base, "peak_one_mb": peak_one, "peak_all_mb": _peak_mb()}


def _timed(fn: Any, ranks: tuple[int, ...]) -> dict[str, list[float]]:
    """Wall and CPU (process) seconds of `fn(rank)` for each rank: on a shared machine the CPU time is
    what one free core would take."""
    out: dict[str, list[float]] = {"wall": [], "cpu": []}
    for rank in ranks:
        wall, cpu = time.perf_counter(), time.process_time()
        fn(rank)
        out["wall"].append(time.perf_counter() - wall)
        out["cpu"].append(time.process_time() - cpu)
    return out


def _megatron_alone(config: Any, rank: int) -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=4096)
    ps.initialize_model_parallel(**config.parallel.megatron_sizes(), create_gloo_process_groups=False)
    ps.destroy_model_parallel()
    dist.destroy_process_group()


def _time_all(jobs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        logs = f"{tmp}/all"
        start = time.perf_counter()
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "lifecycle",
                "simulate",
                "--preset",
                "gpt-4096",
                "--all",
                "--log-dir",
                logs,
                "--format",
                "json",
                "--jobs",
                str(jobs),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        took = time.perf_counter() - start
        print(
            f"--all (4,096 ranks, --jobs {jobs})         : {took:.0f} s end to end "
            f"({took / 4096:.3f} s a rank), exit {run.returncode}"
        )
        start = time.perf_counter()
        audit = subprocess.run(
            [sys.executable, "-m", "lifecycle", "audit", logs], cwd=ROOT, capture_output=True, text=True
        )
        print(
            f"lifecycle audit of its logs               : {time.perf_counter() - start:.1f} s: "
            f"{audit.stdout.splitlines()[0] if audit.stdout else audit.stderr[-300:]}"
        )


def _median_of_medians(runs: list[dict[str, Any]], variant: str, kind: str) -> float:
    return float(statistics.median(statistics.median(r[variant][kind]) for r in runs))


PLAN_PHASES = ("imports", "VALIDATED", "SERVICES_READY", "DISTRIBUTED", "MODEL_BUILT", "first step")


def _critical_path(log_dir: str) -> dict[str, float]:
    """Per phase: the last rank's end of it minus the last rank's end of the phase before."""
    import orjson

    ends: dict[str, list[float]] = {}
    connects = [0.0]  # per rank: its groups' creation seconds (gloo connects each group's members then)
    for path in Path(log_dir).glob("rank-*.jsonl"):
        for line in path.read_bytes().splitlines():
            r = orjson.loads(line)
            event = r["event"]
            if event == "timeouts_read":
                connects.append(sum(g.get("connect_s") or 0.0 for g in r.get("groups", [])))
            name = {"lifecycle_started": "start", "imports": "imports"}.get(event)
            if event == "transition_completed" and r.get("dest") in PLAN_PHASES:
                name = r["dest"]
            if event == "step_completed" and r.get("step") == 1:
                name = "first step"
            if name is not None:
                ends.setdefault(name, []).append(r["ts"])
    last = {name: max(values) for name, values in ends.items()}
    out, before = {}, last["start"]
    for name in PLAN_PHASES:
        out[name] = last[name] - before
        before = last[name]
    out["group creation"] = max(connects)  # inside DISTRIBUTED: not a phase of its own
    return out


def _tiny_run(tmp: str, ranks: int, name: str = "") -> dict[str, float]:
    logs = f"{tmp}/tiny-{ranks}{name}"
    command = [sys.executable, "-m", "lifecycle", "run", "--preset", "tiny-gpt", "--steps", "1", "--log-dir", logs]
    if ranks > 1:
        command += ["--nproc", str(ranks)]
    subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True, timeout=900)
    return _critical_path(logs)


def plan_check(sizes: list[int]) -> None:
    """Measure tiny-gpt alone (the constants), then at each size; print the plan's prediction beside."""
    from lifecycle import RunConfig
    from lifecycle.simulate import count_watch
    from lifecycle.testing import PlanConstants, PlanCounts, count_groups, measure_import, measure_store_rtt_s, predict

    with tempfile.TemporaryDirectory() as tmp:
        _tiny_run(tmp, 1, "-cold")  # the first run pays for a cold page cache: the plan assumes a warm one
        alone = _tiny_run(tmp, 1)
        measured = {n: _tiny_run(tmp, n) for n in sizes}
    wall, cpu = measure_import()  # the imports' CPU share, from a fresh process alone
    print(f"imports alone: {wall:.2f} s wall, {cpu:.2f} s CPU ({cpu / wall:.0%})")
    config = RunConfig.preset("tiny-gpt")
    for n in sizes:
        groups = count_groups(config, world_size=n)
        constants = PlanConstants(
            import_s=alone["imports"],
            import_cpu_s=alone["imports"] * min(1.0, cpu / wall),
            store_rtt_s=measure_store_rtt_s(),
            group_call_s=groups.distributed_s / max(1, groups.created),
            validated_s=alone["VALIDATED"],
            services_s=alone["SERVICES_READY"],
            model_s=alone["MODEL_BUILT"],
            step_s=alone["first step"],
        )
        watch = count_watch(n, n, intervals=1)
        checkin = (watch.phases["check_in"].total + watch.phases["join"].total) / n
        counts = PlanCounts(groups_created=groups.created, groups_joined=groups.member, checkin_ops_per_rank=checkin)
        plan = predict(constants, counts, ranks=n, ranks_per_node=n, cores_per_node=os.cpu_count() or 1)
        predicted = dict(plan.phases)
        predicted["DISTRIBUTED"] = predicted.pop("rendezvous") + predicted.pop("groups")
        print(f"tiny-gpt on {n} ranks, one node of {os.cpu_count()} CPUs (load {os.getloadavg()[0]:.1f}):")
        for name in PLAN_PHASES:
            got, want = measured[n][name], predicted[name]
            print(f"  {name:<15} measured {got:8.3f} s  predicted {want:8.3f} s  ratio {want / got if got else 0:5.2f}")
        creation = measured[n].pop("group creation")
        print(f"  {'total':<15} measured {sum(measured[n].values()):8.3f} s  predicted {plan.total_s:8.3f} s")
        print(f"  of DISTRIBUTED, creating its groups took {creation:.3f} s (the slowest rank's, summed connect_s)")


def creations(sizes: list[tuple[int, int]]) -> None:
    """Both creations of megatron's groups compared on sampled ranks of `gpt-4096`'s layout at each size."""
    import megatron.core  # its version, printed

    from lifecycle import RunConfig
    from lifecycle.core_entry.distributed import megatron_kwargs
    from lifecycle.simulate import Layout, differences, prepare, sample_ranks, snapshot_after

    print(f"megatron-core {megatron.core.__version__}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for world, k in sizes:
        config = prepare(RunConfig.preset("gpt-4096"), world_size=world)
        kwargs = {**megatron_kwargs(config), "create_gloo_process_groups": False}
        ranks = sample_ranks(Layout(config.parallel, world), k, seed=0)
        cpu: dict[str, list[float]] = {"megatron": [], "own": []}
        found = []
        for rank in ranks:
            snaps = {}
            for creation in cpu:
                started = time.process_time()
                snaps[creation] = snapshot_after(creation, rank, world, kwargs)
                cpu[creation].append(time.process_time() - started)
            found += differences(rank, snaps["megatron"], snaps["own"])
        medians = ", ".join(f"{c} {statistics.median(v):.3f} s" for c, v in cpu.items())
        print(f"{world:>7} ranks: {len(ranks)} ranks compared, {len(found)} globals differ; CPU a rank: {medians}")
        for d in found[:10]:
            print(f"    rank {d.rank}: {d.name}: megatron {d.megatron!r:.120} own {d.own!r:.120}")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


def main() -> None:
    from lifecycle.launchers.local import run_ranks

    if "--creations" in sys.argv:
        check = argparse.ArgumentParser()
        check.add_argument("--creations", action="store_true")
        check.add_argument("--sizes", default="4096:64,16384:16,131072:4")
        sizes = [tuple(int(x) for x in item.split(":")) for item in check.parse_args().sizes.split(",")]
        creations([(w, k) for w, k in sizes])
        return
    if "--plan-check" in sys.argv:
        check = argparse.ArgumentParser()
        check.add_argument("--plan-check", action="store_true")
        check.add_argument("--sizes", default="2,4,8")
        plan_check([int(n) for n in check.parse_args().sizes.split(",")])
        return

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ranks", type=int, default=20, help="ranks timed per repeat")
    parser.add_argument("--until", choices=("DISTRIBUTED", "MODEL_BUILT"), default="DISTRIBUTED")
    parser.add_argument("--all", action="store_true", help="also time `lifecycle simulate --all` once")
    parser.add_argument("--jobs", type=int, default=1, help="processes for --all")
    parser.add_argument("--record", action="store_true", help="write the figures to benchmarks/results.toml")
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            runs += run_ranks(one_repeat, 1, f"{tmp}/{i}", args.ranks, args.until, timeout_s=900)
    print(
        f"gpt-4096 to {args.until}: {args.repeats} fresh processes x {args.ranks} ranks (+1 first rank); "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    lifecycle = {kind: _median_of_medians(runs, "lifecycle", kind) for kind in ("wall", "cpu")}
    print(
        f"time a rank, lifecycle (median)           : {lifecycle['wall']:.3f} s wall, "
        f"{lifecycle['cpu']:.3f} s CPU   (target < 1 s)"
    )
    if runs[0]["plain"]:
        plain = {kind: _median_of_medians(runs, "plain", kind) for kind in ("wall", "cpu")}
        print(
            f"time a rank, megatron alone (median)      : {plain['wall']:.3f} s wall, {plain['cpu']:.3f} s CPU   "
            f"(lifecycle/core_entry {lifecycle['cpu'] / plain['cpu']:.2f}x in CPU time)"
        )
    one = statistics.median(r["peak_one_mb"] for r in runs)
    base = statistics.median(r["base_mb"] for r in runs)
    grow = statistics.median(r["peak_all_mb"] - r["peak_one_mb"] for r in runs)
    print(
        f"peak RSS, process that simulated 1 rank   : {one:.0f} MB  (target < 500 MB; {base:.0f} MB of it "
        "is torch + megatron + layout before any rank)"
    )
    print(f"peak RSS growth over the next {args.ranks} ranks   : {grow:+.0f} MB")
    if args.record:
        from _results import record

        figures = {"cpu_s": lifecycle["cpu"], "wall_s": lifecycle["wall"], "peak_mb": one, "base_mb": base}
        megatron = {"megatron_cpu_s": plain["cpu"]} if runs[0]["plain"] else {}
        record("simulate", figures | megatron | {"growth_mb": grow, "ranks": args.ranks})
    if args.all:
        _time_all(args.jobs)


if __name__ == "__main__":
    main()
