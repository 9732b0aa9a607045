"""`lifecycle verify-resume`: is a resumed run the uninterrupted one, bit for bit?

Three runs, each in fresh processes on `--nproc` CPU ranks: 2K steps uninterrupted; K steps and a save;
a load of that save and K more steps (`--steps K`). After every step each rank records its loss, the
norm of its gradients, and a hash of every parameter and optimizer state tensor
(`lifecycle.resume.verify`). The two histories are compared step by step: the first step, rank and
value or tensor that differ are printed, or that every one is equal. The resumed run's window from the
load to its first step (`streams_checked`, audit rule LA027) is printed too.

Checkpoints and logs go to a temporary directory, removed at the end; `--keep DIR` (a directory that
does not exist yet) keeps them there.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lifecycle.cli._inputs import EXIT_INPUT, at_least
from lifecycle.cli._lines import tell
from lifecycle.cli._specs import provider_problem
from lifecycle.core_entry.user_providers import NAMES
from lifecycle.log import JSONValue

if TYPE_CHECKING:
    from lifecycle.resume.verify import StepDigest

EXIT_HELP = """exit status: 0 every step is bitwise equal on every rank; 1 a step differs (or a rank failed);
2 bad command-line or config input, or a config whose checkpoints cannot run here (refused with its reason)."""
RANKS_S = 900.0
"""How long one run's ranks may take in all (imports, a loaded machine)."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "verify-resume",
        help="train 2K steps, and K + a save + a resume + K, on CPU ranks; compare them bit for bit",
        description=__doc__,
        epilog=EXIT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", default="tiny-gpt", help="the RunConfig preset to start from")
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override a config field"
    )
    p.add_argument("--provider", default="gpt", help=f"model provider: one of {', '.join(NAMES)}, or module:NAME")
    p.add_argument(
        "--steps", type=at_least(1, "--steps 3"), default=3, metavar="K", help="steps before the save, and after it"
    )
    p.add_argument("--nproc", type=at_least(1, "--nproc 2"), default=2, help="CPU ranks of each run (default 2)")
    p.add_argument("--keep", metavar="DIR", help="keep the checkpoints and logs in DIR (must not exist yet)")
    p.set_defaults(func=run)


def _refuse(message: str) -> int:
    tell("verify-resume", message)
    return EXIT_INPUT


def run(args: argparse.Namespace) -> int:
    """check input → the three runs → compare → print."""
    from lifecycle.config import RunConfig, refuse_repeated
    from lifecycle.errors import LifecycleError

    problem = provider_problem(args.provider)
    if args.keep is not None and Path(args.keep).exists():
        problem = problem or f"--keep {args.keep!r} exists; give a directory that does not exist yet"
    if problem:
        return _refuse(problem)
    root = Path(args.keep) if args.keep is not None else Path(tempfile.mkdtemp(prefix="lifecycle-verify-resume-"))
    try:
        root.mkdir(parents=True, exist_ok=True)
        try:
            refuse_repeated(args.overrides)
            configs = {
                part: RunConfig.preset(
                    args.preset,
                    [*args.overrides, *extra, f"logging.log_dir={root / part}"],
                    values={"parallel.world_size": args.nproc},
                ).to_dict()
                for part, extra in _parts(root).items()
            }
        except LifecycleError as exc:
            return _refuse(str(exc))
        problems = _problems(configs["first"])  # every rank would refuse it: nothing is started
        return _refuse("; ".join(problems)) if problems else _verify(configs, args)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
        else:
            tell("verify-resume", f"checkpoints and logs kept in {root}")


def _problems(config_data: dict[str, JSONValue]) -> list[str]:
    """What VALIDATED would refuse in the run that saves, on any rank of this machine (the config and
    its environment: CUDA, Apex/TE for the distributed optimizer's checkpoints, paths), one line each."""
    from lifecycle.cli._inputs import RANK_CHECKS
    from lifecycle.config import RunConfig, probe_environment, validate

    config = RunConfig.from_dict(config_data)
    problems = validate(config, environment=probe_environment(config))
    return [str(p) for p in problems if p.check not in RANK_CHECKS]


def _parts(root: Path) -> dict[str, list[str]]:
    return {
        "whole": [],
        "first": [f"checkpoint.save={root / 'checkpoint'}"],
        "second": [f"checkpoint.load={root / 'checkpoint'}"],
    }


def _verify(configs: dict[str, dict[str, JSONValue]], args: argparse.Namespace) -> int:
    from lifecycle.errors import RankFailed
    from lifecycle.launchers.local import run_ranks

    runs: dict[str, list[PartRun]] = {}
    for part, steps in (("first", args.steps), ("second", args.steps), ("whole", 2 * args.steps)):
        try:
            runs[part] = run_ranks(
                run_part, args.nproc, configs[part], args.provider, steps, part == "first", timeout_s=RANKS_S
            )
        except RankFailed as exc:
            return _failed(part, exc.errors)
        except KeyboardInterrupt:
            return 128 + 2
    return _report(runs, args)


def _failed(part: str, errors: dict[int, str]) -> int:
    """A run's failure, each rank's line; exit 2 when every rank refused the config, else 1."""
    for rank, line in sorted(errors.items()):
        tell("verify-resume", f"the {part} run's rank {rank} failed: {line}")
    refused = all(line.startswith("ConfigError: ") for line in errors.values())  # the type, never the text
    return EXIT_INPUT if refused else 1


def _report(runs: dict[str, list[PartRun]], args: argparse.Namespace) -> int:
    from lifecycle.resume.verify import first_difference

    whole = [rank.steps for rank in runs["whole"]]
    resumed = [first.steps + second.steps for first, second in zip(runs["first"], runs["second"], strict=True)]
    k, n = args.steps, args.nproc
    ranks = f"{n} rank{'s' if n != 1 else ''}"
    print(f"verify-resume: {args.preset}, {ranks}: {2 * k} steps uninterrupted; {k} steps, a save, a load, {k} steps")
    for rank, second in enumerate(runs["second"]):
        print(f"rank {rank}: {_window_line(second.window)}")
    difference = first_difference(whole, resumed)
    if difference is None:
        tensors = len(whole[0][-1].tensors) if whole and whole[0] else 0
        print(f"bitwise equal: steps 1-{2 * k} on every rank (loss, gradient norm, {tensors} tensors a rank)")
        return 0
    print(f"NOT EQUAL: {difference}")
    return 1


def _window_line(window: JSONValue) -> str:
    if not isinstance(window, dict):
        return "no resume window was recorded"
    moved = window.get("moved") or []
    if moved:
        names = ", ".join(f"{m['stream']} by {m['caller']}" for m in moved)
        return f"the window from the load to step {window.get('step')}: {len(moved)} stream(s) moved: {names}"
    same = window.get("optimizer") == window.get("saved_optimizer")
    counts = (
        "the optimizer's counts are the checkpoint's" if same else "the optimizer's counts are NOT the checkpoint's"
    )
    return f"the window from the load to step {window.get('step')}: no random stream moved; {counts}"


@dataclass(frozen=True, slots=True, kw_only=True)
class PartRun:
    """What one rank of a run returns (`run_part`): a digest after each step, and after a load the
    resume window's `streams_checked` record (None without one)."""

    steps: list[StepDigest]
    window: dict[str, JSONValue] | None


def run_part(config_data: dict[str, JSONValue], provider_spec: str, steps: int, save: bool) -> PartRun:
    """On one rank: start up (loading `checkpoint.load` when the config names one), train `steps`
    steps with a digest after each, save to `checkpoint.save` when `save`; the digests and, after a
    load, the resume window's `streams_checked` fields."""
    import warnings

    from lifecycle.config import RunConfig
    from lifecycle.core_entry.train import checkpoint_step, save_after_steps, train_steps
    from lifecycle.core_entry.user_providers import Provider
    from lifecycle.engine import Lifecycle
    from lifecycle.resume.verify import digest
    from states import State

    warnings.simplefilter("ignore")
    digests: list[StepDigest] = []
    with Lifecycle(RunConfig.from_dict(config_data), Provider.of(provider_spec)) as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        start = checkpoint_step(lc.runtime)
        train_steps(lc, steps, on_step=lambda result: digests.append(digest(lc.runtime, result.step, result.loss)))
        if save:
            save_after_steps(lc, start + steps)
        log = str(lc.log_path)
    return PartRun(steps=digests, window=_window(log))


def _window(log: str) -> dict[str, JSONValue] | None:
    import orjson

    with open(log, "rb") as f:
        records = [orjson.loads(line) for line in f if b'"streams_checked"' in line]
    return records[0] if records else None
