"""`lifecycle audit PATH...`: check startup logs against the rules; exit 0 clean, 1 violation, 2 unreadable."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "audit",
        help="check per-rank startup logs: rules, cross-rank agreement, blame",
        description="Exit status: 0 clean, 1 a rule is violated, 2 the input cannot be read.",
    )
    parser.add_argument(
        "paths", nargs="+", metavar="PATH", help="rank-*.jsonl files, directories holding them, or - for stdin"
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument(
        "--select",
        action="append",
        default=[],
        metavar="RULES",
        help="only these rules: ids (LA001), id prefixes (LA00) or slugs, comma-separated",
    )
    parser.add_argument(
        "--ignore", action="append", default=[], metavar="RULES", help="skip these rules (same forms as --select)"
    )
    parser.add_argument("--blame", action="store_true", help="time per state, slowest first, and stragglers")
    parser.add_argument(
        "--critical-chain", action="store_true", help="the ranks and states that held the whole startup back"
    )
    parser.add_argument(
        "--diff",
        nargs=2,
        type=int,
        default=None,
        metavar=("A", "B"),
        help="compare restart cycles A and B: what was created or bound differently, config drift, hooks added twice",
    )
    parser.add_argument(
        "--jobs",
        type=at_least_one,
        default=None,
        metavar="N",
        help="processes reading the files (default: one per CPU, up to 8, from 256 files on)",
    )
    parser.set_defaults(func=run)


def at_least_one(text: str) -> int:
    """argparse type for `--jobs`: an integer of 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer; write e.g. --jobs 4") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1; write e.g. --jobs 4") from None
    return value


def run(args: argparse.Namespace) -> int:
    from lifecycle.audit import EXIT_UNREADABLE, as_json, audit, printable, text

    try:
        result = audit(args.paths, select=args.select, ignore=args.ignore, jobs=args.jobs)
    except ValueError as exc:  # an unknown or empty rule name in --select/--ignore
        print(f"lifecycle audit: {printable(str(exc))}", file=sys.stderr)
        return EXIT_UNREADABLE
    for error in result.errors:
        print(f"lifecycle audit: {printable(str(error))}", file=sys.stderr)
    if args.format == "json":
        sys.stdout.buffer.write(as_json(result) + b"\n")
    else:
        print(text(result, show_blame=args.blame, show_chain=args.critical_chain))
        if args.diff is not None:
            from lifecycle.audit import diff

            print("\n".join(map(printable, diff(result.ranks, *args.diff))))
    return result.exit_code
