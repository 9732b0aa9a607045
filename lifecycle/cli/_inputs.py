"""`lifecycle run`'s input: the config it loads and the checks it runs before anything starts.

Exit statuses: bad command-line or config input (a malformed `--set`, an unknown key, a value
outside its field's domain such as `training.steps=-1`) exits 2 with one line per problem, each
naming the field and the fix; problems found by validation (values that do not fit together or with
the world size about to launch) exit 1. Neither needs torch or megatron.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from lifecycle.log import JSONValue

if TYPE_CHECKING:
    from lifecycle.config import Problem, RunConfig

# Intrinsic checks about one field's own value: their problems are bad input (exit 2).
INPUT_CHECKS = frozenset({"positive_sizes", "optimizer", "bounds", "local_paths"})
EXIT_INPUT, EXIT_INVALID = 2, 1


def say(message: str) -> None:
    """One message of `lifecycle run` on stderr, finished as every CLI line is (`_lines.finished`)."""
    from lifecycle.cli._lines import tell

    tell("run", message)


def non_negative(text: str) -> int:
    """argparse type for counts that may be 0 (`--steps`)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer; write e.g. --steps 3") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; write 0 or more, e.g. --steps 3")
    return value


def at_least(minimum: int, example: str) -> Callable[[str], int]:
    """argparse type for an integer of at least `minimum`; `example` shows a good one (`--steps 3`)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer; write e.g. {example}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below {minimum}; write {minimum} or more, e.g. {example}")
        return value

    return parse


def load(args: argparse.Namespace) -> RunConfig:
    """The RunConfig from `--preset`/`--config`, `--set`, `--plan` and `--log-dir` (`--config` and
    `--log-dir` are paths, taken as typed)."""
    from lifecycle.config import RunConfig, refuse_repeated

    refuse_repeated(args.overrides)
    values = flag_values(args)
    if args.config:
        return RunConfig.from_yaml(Path(args.config), args.overrides, values=values)
    return RunConfig.preset(args.preset or "tiny-gpt", args.overrides, values=values)


def flag_values(args: argparse.Namespace) -> dict[str, JSONValue]:
    """The config fields `--plan`, `--overwrite` and `--log-dir` set, as typed values applied after
    `--set` (never read as an override's text: a path stays whole)."""
    values: dict[str, JSONValue] = {}
    if args.plan:
        values["plan"] = args.plan
    if getattr(args, "overwrite", False):
        values["logging.existing"] = "overwrite"
    if getattr(args, "log_dir", None):
        values["logging.log_dir"] = args.log_dir
    return values


def with_world_size(config: RunConfig, world: int | None) -> RunConfig:
    """`config` as each rank of a `world`-rank launch will validate it."""
    if world is None or config.parallel.world_size is not None:
        return config
    from lifecycle.config import RunConfig

    return RunConfig.from_dict(config.to_dict(), values={"parallel.world_size": world})


def report(problems: list[Problem], *, launch_world: int | None) -> int | None:
    """Print the problems once; EXIT_INPUT for bad input, EXIT_INVALID for validation problems
    (only before a launch: otherwise VALIDATED finds and logs them), None when there are none."""
    bad_input = [p for p in problems if p.check in INPUT_CHECKS]
    if bad_input:
        for p in bad_input:
            say(str(p))
        return EXIT_INPUT
    if problems and launch_world is not None:
        lines = "\n  - ".join(str(p) for p in problems)
        say(
            f"the config has {len(problems)} problem(s) for a {launch_world}-rank launch; nothing was "
            f"launched:\n  - {lines}"
        )
        return EXIT_INVALID
    return None


RANK_CHECKS = frozenset({"launcher"})
"""Environment checks that depend on the rank's own launcher variables: run on each rank only."""


def check_before_start(config: RunConfig, launch_world: int | None) -> int | None:
    """The intrinsic checks, with the world size about to launch; before a launch also the checks of
    this machine that do not depend on the rank (CUDA, optional packages such as Apex/TE for the
    distributed optimizer's checkpoints, paths, the log directory), so that a problem every rank
    would find is printed once and nothing is launched. An exit status or None."""
    from lifecycle.config import validate

    checked = with_world_size(config, launch_world)
    status = report(validate(checked, environment=False), launch_world=launch_world)
    if status is not None or launch_world is None:
        return status
    from lifecycle.config import probe_environment

    problems = validate(checked, environment=probe_environment(checked))  # imports torch, for CUDA
    return report([p for p in problems if p.check not in RANK_CHECKS], launch_world=launch_world)
