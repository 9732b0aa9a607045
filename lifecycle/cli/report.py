"""`lifecycle report PATH... -o report.html`: one self-contained HTML page of the startup."""

from __future__ import annotations

import argparse

from lifecycle.cli._lines import tell


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
        type=rules_url,
        metavar="URL",
        help="where the rule pages are: links go to URL + LA0NN.md (default: docs/rules/)",
    )
    parser.add_argument(
        "--per-rank-up-to",
        type=count,
        default=64,
        metavar="N",
        help="one row per rank up to N ranks; above it, ranks grouped by timing and outliers",
    )
    parser.set_defaults(func=run)


def count(text: str) -> int:
    """argparse type for `--per-rank-up-to`: an integer, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer; write e.g. --per-rank-up-to 64") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be 0 or more; write e.g. --per-rank-up-to 64")
    return value


def rules_url(text: str) -> str:
    """argparse type for `--rules-url`: an http(s) URL or a path (the page links to it)."""
    from lifecycle.export import rules_url_problem

    problem = rules_url_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def run(args: argparse.Namespace) -> int:
    from lifecycle.audit import EXIT_UNREADABLE, printable
    from lifecycle.cli.export import cannot_write
    from lifecycle.errors import LogUnreadable
    from lifecycle.export import load, write_report

    try:
        trace = load(args.paths)
        path = write_report(trace, args.output, rules_url=args.rules_url, per_rank_up_to=args.per_rank_up_to)
    except LogUnreadable as exc:
        tell("report", exc)
        return EXIT_UNREADABLE
    except OSError as exc:
        return cannot_write(args.output, exc, "report")
    print(f"wrote {printable(str(path))} ({len(trace.ranks)} ranks)")
    return 0
