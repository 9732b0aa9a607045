"""`lifecycle` command line: parse, dispatch to one subcommand module, exit with its code."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from lifecycle.cli import audit, experiment, graph, plot, run, simulate

# Each command module defines `register(subparsers)`; its parser sets `func(args) -> int`.
COMMANDS = (run, audit, plot, graph, experiment, simulate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lifecycle",
        description="Drive and audit Megatron training startup as an explicit state machine.",
    )
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
