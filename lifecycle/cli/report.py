"""`lifecycle report PATH... -o report.html`: one self-contained HTML page of the startup."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "report",
        help="write one self-contained HTML page: timeline, violations, root cause, restart cycles",
        description="The page needs no network: open it from disk or attach it to an incident. "
        "Exit status: 0 written, 2 the logs cannot be read.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="rank-*.jsonl files or directories holding them")
    parser.add_argument("-o", "--output", required=True, help="HTML file to write")
    parser.add_argument(
        "--rules-url",
        default="docs/rules/",
        metavar="URL",
        help="where the rule pages are: links go to URL + LA0NN.md (default: docs/rules/)",
    )
    parser.add_argument(
        "--per-rank-up-to",
        type=int,
        default=64,
        metavar="N",
        help="one row per rank up to N ranks; above it, ranks grouped by timing and outliers",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from lifecycle.audit import EXIT_UNREADABLE, printable
    from lifecycle.errors import LogUnreadable
    from lifecycle.export import load, write_report

    try:
        trace = load(args.paths)
        path = write_report(trace, args.output, rules_url=args.rules_url, per_rank_up_to=args.per_rank_up_to)
    except LogUnreadable as exc:
        print(f"lifecycle report: {printable(str(exc))}", file=sys.stderr)
        return EXIT_UNREADABLE
    except OSError as exc:
        print(f"lifecycle report: cannot write {args.output!r}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    print(f"wrote {path} ({len(trace.ranks)} ranks)")
    return 0
