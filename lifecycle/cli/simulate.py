"""`lifecycle simulate`: rehearse ranks of a large job's startup on this machine, on the fake backend.

Validates the job's config once, then drives each chosen rank to DISTRIBUTED (or MODEL_BUILT, with a
shrunken model of the same layout) through the real engine, one after another, and checks where
megatron placed it against `RankGenerator`. Exit status: 0 every rank agrees, 1 the config is
invalid or a rank failed or disagrees, 2 a command-line flag is wrong. See docs/simulate.md.

`--scale` instead counts what the whole job asks of its store host (the rank watch of every rank,
run against a counting store) and how many process groups a rank creates; `--plan` predicts the
startup's critical path per state from constants measured on this machine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from lifecycle.cli._lines import tell
from lifecycle.log import JSONValue

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from lifecycle.config import RunConfig
    from lifecycle.simulate import Layout, RankReport, Simulation, SimulationResult

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
DEFAULT_SAMPLE = 16


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "simulate",
        help="rehearse chosen ranks of a large job on the fake backend",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_job_flags(p)
    _add_rank_flags(p)
    _add_output_flags(p)
    _add_mode_flags(p)
    p.set_defaults(func=run)


def _add_job_flags(p: argparse.ArgumentParser) -> None:
    """Which job: a preset or a config file, its world size, and overrides."""
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--preset", help="a shipped preset, e.g. gpt-4096")
    src.add_argument("--config", help="a RunConfig YAML file")
    p.add_argument("--world-size", type=int, help="ranks in the job (default: parallel.world_size)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set parallel.ep=16 (repeatable)",
    )


def _add_rank_flags(p: argparse.ArgumentParser) -> None:
    """Which ranks to simulate, and how far."""
    pick = p.add_mutually_exclusive_group()
    pick.add_argument("--ranks", help="ranks to simulate: 0,37,4095 or ranges 0-7")
    pick.add_argument(
        "--sample",
        type=int,
        metavar="K",
        help=f"K ranks: those that matter first, then random ones (default: {DEFAULT_SAMPLE})",
    )
    pick.add_argument("--all", action="store_true", help="every rank of the job")
    p.add_argument("--seed", type=int, default=0, help="seed for --sample's random ranks")
    p.add_argument(
        "--until",
        choices=("DISTRIBUTED", "MODEL_BUILT"),
        default="DISTRIBUTED",
        help="DISTRIBUTED: process groups; MODEL_BUILT: also a shrunken model of the same layout",
    )


def _add_output_flags(p: argparse.ArgumentParser) -> None:
    """Where the results and logs go, and how many processes make them."""
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--log-dir", help="write each rank's startup log here (for `lifecycle audit`)")
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="processes simulating ranks (default: 1)")


def _add_mode_flags(p: argparse.ArgumentParser) -> None:
    """`--scale` and `--plan`: the whole job at once instead of chosen ranks."""
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--scale",
        action="store_true",
        help="count the store traffic of the rank watch at every rank, and the process groups of a rank",
    )
    mode.add_argument("--plan", action="store_true", help="predict the startup's critical path per state")
    p.add_argument(
        "--ranks-per-node", type=int, default=8, metavar="K", help="ranks a node, for --scale and --plan (default: 8)"
    )


def run(args: argparse.Namespace) -> int:
    import warnings

    warnings.filterwarnings("ignore", category=UserWarning, module=r"megatron\.")
    from lifecycle import ConfigError

    usage = _check_flags(args)
    if usage:
        return _usage(usage)
    try:
        config = _load(args)
    except ConfigError as exc:
        return _usage(str(exc))
    world = args.world_size or config.parallel.world_size
    if world is None:
        return _usage("--world-size: the config sets no parallel.world_size; pass --world-size N")
    if args.scale or args.plan:
        return _whole_job(args, config, world)
    try:
        explicit = _explicit_ranks(args, world)
    except ValueError as exc:
        return _usage(f"--ranks {args.ranks}: {exc}; write e.g. --ranks 0,37,{world - 1}")
    return _simulate(args, config, world, explicit)


def _check_flags(args: argparse.Namespace) -> str | None:
    for flag, value in (
        ("--world-size", args.world_size),
        ("--sample", args.sample),
        ("--jobs", args.jobs),
        ("--ranks-per-node", args.ranks_per_node),
    ):
        if value is not None and value < 1:
            return f"{flag} {value}: must be at least 1"
    if args.scale or args.plan:
        mode = "--scale" if args.scale else "--plan"
        for flag, given in (
            ("--ranks", args.ranks),
            ("--sample", args.sample),
            ("--all", args.all),
            ("--log-dir", args.log_dir),
            ("--until", args.until != "DISTRIBUTED"),
            ("--jobs", args.jobs != 1),
        ):
            if given:
                return f"{flag}: {mode} covers every rank of the job at once; drop {flag}, or drop {mode}"
    if args.log_dir:
        from lifecycle.log import LogDir

        log_dir = Path(args.log_dir)
        problem = LogDir(log_dir).problem()
        if problem:
            return f"--log-dir: {problem}"
        if any(log_dir.glob("rank-*.jsonl")):
            return (
                f"--log-dir {args.log_dir}: already holds rank logs, which the audit would mix with "
                "this run's; choose an empty or new directory"
            )
    return None


def _load(args: argparse.Namespace) -> RunConfig:
    from lifecycle.config import RunConfig, refuse_repeated

    refuse_repeated(args.overrides)
    if args.config:
        return RunConfig.from_yaml(args.config, args.overrides)
    return RunConfig.preset(args.preset, args.overrides)


def _explicit_ranks(args: argparse.Namespace, world: int) -> list[int] | None:
    from lifecycle.simulate import parse_ranks

    return parse_ranks(args.ranks, world) if args.ranks else None


def _simulate(args: argparse.Namespace, config: RunConfig, world: int, explicit: list[int] | None) -> int:
    from lifecycle import ConfigError
    from lifecycle.simulate import Layout, Simulation, prepare, simulate
    from states import State

    until = State[args.until]
    try:
        config = prepare(config, world_size=world, until=until)
    except ConfigError as exc:
        tell("simulate", exc)
        tell("simulate", "no rank was simulated")
        return EXIT_PROBLEM
    layout = Layout(config.parallel, world)
    ranks, selection = _choose(args, layout, explicit)
    sim = Simulation(config=config, ranks=tuple(ranks), until=until, log_dir=args.log_dir, selection=selection)
    progress = _Progress(len(ranks), enabled=args.format == "text" and sys.stderr.isatty())
    try:
        with progress:
            result = simulate(sim, layout, jobs=args.jobs, on_report=progress)
    except KeyboardInterrupt:
        where = f"; their logs are in {args.log_dir}" if args.log_dir else ""
        tell("simulate", f"interrupted after {progress.done} of {len(ranks)} ranks{where}")
        return EXIT_INTERRUPTED
    if args.format == "json":
        import orjson

        sys.stdout.buffer.write(orjson.dumps(as_json(result, layout), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(as_text(result, layout))
    return EXIT_OK if result.ok else EXIT_PROBLEM


def _whole_job(args: argparse.Namespace, config: RunConfig, world: int) -> int:
    """`--scale` or `--plan`: the whole job at once."""
    from lifecycle import ConfigError

    if world % args.ranks_per_node:
        return _usage(f"--ranks-per-node {args.ranks_per_node}: must divide the {world} ranks; pass e.g. 8")
    try:
        text, data = _scale(args, config, world) if args.scale else _plan(args, config, world)
    except ConfigError as exc:
        tell("simulate", exc)
        tell("simulate", "nothing was counted")
        return EXIT_PROBLEM
    if args.format == "json":
        import orjson

        sys.stdout.buffer.write(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(text)
    return EXIT_OK


def _scale(args: argparse.Namespace, config: RunConfig, world: int) -> tuple[str, dict[str, JSONValue]]:
    from lifecycle.simulate import scale_report, scale_text

    report = scale_report(config, world_size=world, ranks_per_node=args.ranks_per_node)
    return scale_text(report), report.to_json()


def _plan(args: argparse.Namespace, config: RunConfig, world: int) -> tuple[str, dict[str, JSONValue]]:
    from lifecycle.simulate import plan_text, startup_plan

    plan = startup_plan(config, world_size=world, ranks_per_node=args.ranks_per_node)
    return plan_text(plan), plan.to_json()


def _choose(args: argparse.Namespace, layout: Layout, explicit: list[int] | None) -> tuple[list[int], str]:
    from lifecycle.simulate import format_ranks, sample_ranks

    if explicit is not None:
        return explicit, f"ranks {format_ranks(explicit)}"
    if args.all:
        return list(range(layout.world)), "all"
    count = args.sample or DEFAULT_SAMPLE
    return sample_ranks(layout, count, args.seed), f"sample {count} (seed {args.seed})"


class _Progress:
    """Counts finished ranks; draws a rich progress bar on stderr when enabled."""

    def __init__(self, total: int, *, enabled: bool) -> None:
        self.total, self.enabled, self.done = total, enabled, 0
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn, TimeRemainingColumn

            self.bar = Progress(
                "simulating ranks",
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                "eta",
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("ranks", total=self.total)
        return self

    def __call__(self, _report: RankReport) -> None:
        self.done += 1
        if self.bar is not None and self.task is not None:
            self.bar.advance(self.task)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def _usage(message: str) -> int:
    tell("simulate", message)
    return EXIT_USAGE


def _sizes(result: SimulationResult, layout: Layout) -> str:
    p = result.simulation.config.parallel
    dp = layout.world // (p.tp * p.pp * p.cp)
    etp = f" ETP{p.etp}" if p.etp else ""
    vpp = f" VPP{p.vpp}" if p.vpp else ""
    return f"TP{p.tp} PP{p.pp}{vpp} CP{p.cp} EP{p.ep}{etp} DP{dp}"


def as_text(result: SimulationResult, layout: Layout) -> str:
    """A header, one row per simulated rank, and where the logs went."""
    sim, reports = result.simulation, result.reports
    out = [
        f"simulated {len(reports)} of {sim.world_size} ranks ({_sizes(result, layout)}) to {sim.until.name} "
        f"on the fake backend in {result.duration_s:.1f} s (median {result.median_rank_s:.3f} s a rank), "
        f"run {sim.run_id}",
        f"  {'rank':>6} {'tp':>3} {'pp':>3} {'cp':>3} {'ep':>3} {'dp':>5} {'etp':>3} {'edp':>4}  "
        f"{'stage':<10} {'embedding':<12}{_params_header(sim)}  RankGenerator",
    ]
    out += [_row(r, params=bool(_params_header(sim))) for r in reports]
    bad = result.failed
    out.append(
        f"{len(reports) - len(bad)} rank(s) agree with RankGenerator"
        + (f"; {len(bad)} failed or disagree" if bad else "")
    )
    if sim.log_dir:
        out.append(f"startup logs: {sim.log_dir} (check them with: lifecycle audit {sim.log_dir})")
    return "\n".join(out)


def _params_header(sim: Simulation) -> str:
    return f" {'params':>9}" if sim.until.name == "MODEL_BUILT" else ""


def _row(report: RankReport, *, params: bool) -> str:
    o = report.observed
    if o is None:
        return f"  {report.rank:>6} reached {report.state}: {report.error}"
    stage = (
        "first+last"
        if o.first_stage and o.last_stage
        else "first"
        if o.first_stage
        else "last"
        if o.last_stage
        else "-"
    )
    embedding = ",".join(map(str, o.embedding_group)) or "-"
    count = f" {report.parameters if report.parameters is not None else '-':>9}" if params else ""
    verdict = "agrees" if not report.mismatches else "DIFFERS: " + "; ".join(report.mismatches)
    return (
        f"  {o.rank:>6} {o.tp:>3} {o.pp:>3} {o.cp:>3} {o.ep:>3} {o.dp:>5} {o.etp:>3} {o.edp:>4}  "
        f"{stage:<10} {embedding:<12}{count}  {verdict}"
    )


def as_json(result: SimulationResult, layout: Layout) -> dict[str, JSONValue]:
    sim = result.simulation
    p = sim.config.parallel
    return {
        "run_id": sim.run_id,
        "world_size": sim.world_size,
        "until": sim.until.name,
        "selection": sim.selection,
        "parallel": {
            "tp": p.tp,
            "pp": p.pp,
            "cp": p.cp,
            "ep": p.ep,
            "etp": p.etp,
            "vpp": p.vpp,
            "dp": layout.world // (p.tp * p.pp * p.cp),
        },
        "order": layout.order,
        "log_dir": sim.log_dir,
        "duration_s": result.duration_s,
        "median_rank_s": result.median_rank_s,
        "ok": result.ok,
        "ranks": [_rank_json(r) for r in result.reports],
    }


def _rank_json(report: RankReport) -> dict[str, JSONValue]:
    return {
        "rank": report.rank,
        "state": report.state,
        "duration_s": report.duration_s,
        "placement": None if report.observed is None else report.observed.to_dict(),
        "agrees": report.ok,
        "mismatches": list(report.mismatches),
        "parameters": report.parameters,
        "error": report.error,
        **({"expected": report.expected.to_dict()} if report.mismatches else {}),
    }
