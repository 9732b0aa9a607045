"""`lifecycle` command line: parse, dispatch to one subcommand module, exit with its code."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from lifecycle.cli import audit, experiment, export, graph, plot, report, run, simulate

# Each command module defines `register(subparsers)`; its parser sets `func(args) -> int`.
COMMANDS = (run, audit, plot, graph, experiment, simulate, export, report)


class Parser(argparse.ArgumentParser):
    """argparse without abbreviations (`--np` is not `--nproc`: torchrun has its own `--nproc-*`),
    reporting bad input as one line and exit status 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; see `{self.prog} --help`\n")


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("megatron-lifecycle")
    except PackageNotFoundError:
        return "unknown (not installed)"


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
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
