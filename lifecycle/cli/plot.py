"""`lifecycle plot PATH... -o startup.png|svg`: a timeline of states per rank, like systemd-analyze plot."""

from __future__ import annotations

import argparse

from lifecycle.cli._lines import tell
from lifecycle.redaction import redact_text


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("plot", help="draw the startup timeline of every rank (needs matplotlib)")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="rank-*.jsonl files, directories, or -")
    parser.add_argument("-o", "--output", required=True, help="image to write: .png, .svg or .pdf")
    parser.add_argument(
        "--max-ranks",
        type=int,
        default=64,
        help="draw each rank up to this many ranks; above it, percentile bands and outliers",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from lifecycle.audit import EXIT_UNREADABLE, audit, plot
    from lifecycle.errors import ExtraNotInstalled

    result = audit(args.paths)
    for error in result.errors:
        tell("plot", error)
    if result.errors:
        return EXIT_UNREADABLE
    try:
        path = plot(result.ranks, args.output, max_ranks=args.max_ranks)
    except (ExtraNotInstalled, ValueError) as exc:
        tell("plot", exc)
        return EXIT_UNREADABLE
    print(f"wrote {redact_text(str(path))}")
    return 0
