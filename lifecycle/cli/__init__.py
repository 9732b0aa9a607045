"""`lifecycle` command line: parse, dispatch to one subcommand module, exit with its code."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from lifecycle.cli import (
    audit,
    check_binding,
    experiment,
    export,
    graph,
    plot,
    report,
    run,
    simulate,
    verify_resume,
)
from lifecycle.cli._inputs import load as load
from lifecycle.cli._launch import launch_env as launch_env
from lifecycle.cli._launch import launch_world_size as launch_world_size
from lifecycle.cli._launch import torchrun_command as torchrun_command
from lifecycle.cli._launch import wants_launch as wants_launch
from lifecycle.cli._lines import finished as finished

# Each command module defines `register(subparsers)`; its parser sets `func(args) -> int`.
COMMANDS = (run, audit, plot, graph, experiment, simulate, check_binding, verify_resume, export, report)


class Parser(argparse.ArgumentParser):
    """argparse without abbreviations (`--np` is not `--nproc`: torchrun has its own `--nproc-*`),
    reporting bad input as one line and exit status 2."""

    @property
    def allow_abbrev(self) -> bool:
        """Always False, whatever argparse's `__init__` (or a subparser's) was given."""
        return False

    @allow_abbrev.setter
    def allow_abbrev(self, _given: bool) -> None:
        pass

    def error(self, message: str) -> NoReturn:
        from lifecycle.cli._lines import clause, finished  # the bad value is echoed: never a credential

        self.exit(2, f"{self.prog}: error: {finished(f'{clause(message)}; see `{self.prog} --help`')}\n")


def version() -> str:
    """`lifecycle --version`: the project's, torch's and megatron-core's versions (metadata only)."""
    from lifecycle.core_entry.compat import versions

    found = versions()
    return f"{found.pop('megatron-lifecycle')} ({', '.join(f'{k} {v}' for k, v in found.items())})"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="lifecycle",
        description="Drive and audit Megatron training startup as an explicit state machine.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from lifecycle.engine import quiet_library_loggers

    quiet_library_loggers()  # megatron's, transitions' and torch's notices go to the startup log only
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
