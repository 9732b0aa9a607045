"""`lifecycle audit PATH...`: check startup logs against the rules; exit 0 clean, 1 violation, 2 unreadable
(with `--format verdict`: 0 only for the outcome `clean`, 2 for `unreadable`, 1 for every other)."""

from __future__ import annotations

import argparse
import sys

from lifecycle.cli._lines import tell


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "audit",
        help="check per-rank startup logs: rules, cross-rank agreement, blame",
        description="Exit status: 0 clean, 1 a rule is violated, 2 the input cannot be read.",
    )
    parser.add_argument(
        "paths", nargs="+", metavar="PATH", help="rank-*.jsonl files, directories holding them, or - for stdin"
    )
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
    _follow_arguments(parser)
    parser.set_defaults(func=run)


def _follow_arguments(parser: argparse.ArgumentParser) -> None:
    """--format and the verdict's --follow, --output, --grace, --idle-timeout."""
    parser.add_argument(
        "--format",
        choices=("text", "json", "verdict"),
        default="text",
        help="verdict: one small JSON document for a supervisor (docs/log-format.md#the-verdict): culprit rank "
        "and host, state, class (config, infrastructure, user-code), action (STOP or RESTART), evidence",
    )
    parser.add_argument(
        "--follow",
        action="store_true",
        help="with --format verdict: follow the log directory while the ranks write it; the verdict as soon as "
        "the first failure is known (one that only its peers name and not as lost: after --grace seconds), "
        "or when every rank shut down",
    )
    parser.add_argument("--output", metavar="FILE", help="with --follow: also write the verdict to FILE (atomically)")
    parser.add_argument("--grace", type=at_least_zero, default=1.0, metavar="S", help=argparse.SUPPRESS)
    parser.add_argument(
        "--idle-timeout",
        type=at_least_zero,
        default=600.0,
        metavar="S",
        help="with --follow: judge the logs as they stand after S seconds without a new record (default 600)",
    )


def at_least_zero(text: str) -> float:
    """argparse type for seconds: a number of 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds; write e.g. 30") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{value:g} must be 0 or more seconds") from None
    return value


def follow(args: argparse.Namespace) -> int:
    """`--format verdict --follow DIR [--output FILE]`: one verdict, printed (and written) when known."""
    import json

    from lifecycle.audit import VERDICT_EXIT, follow_verdict, printable, verdict_ours, write_output

    if args.format != "verdict" or len(args.paths) != 1:
        tell("audit", "--follow needs --format verdict and one log directory")
        return 2
    doc = follow_verdict(args.paths[0], grace_s=args.grace, idle_timeout_s=args.idle_timeout)
    line = json.dumps(doc)
    if args.output:
        try:
            write_output(args.output, line.encode() + b"\n", ours=verdict_ours)
        except OSError as exc:
            tell("audit", f"{args.output}: {exc.strerror or exc}")
            return 2
    print(printable(line), flush=True)
    return VERDICT_EXIT[str(doc.get("outcome"))]


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

    if args.follow:
        return follow(args)
    try:
        result = audit(args.paths, select=args.select, ignore=args.ignore, jobs=args.jobs)
    except ValueError as exc:  # an unknown or empty rule name in --select/--ignore
        tell("audit", exc)
        return EXIT_UNREADABLE
    for error in result.errors:
        tell("audit", error)
    if args.format == "verdict":
        import json

        from lifecycle.audit import VERDICT_EXIT, judge

        doc = judge(result)
        print(printable(json.dumps(doc)))
        return VERDICT_EXIT[str(doc["outcome"])]  # the outcome decides: they never disagree
    elif args.format == "json":
        sys.stdout.buffer.write(as_json(result) + b"\n")
    else:
        print(text(result, show_blame=args.blame, show_chain=args.critical_chain))
        if args.diff is not None:
            from lifecycle.audit import diff

            print("\n".join(map(printable, diff(result.ranks, *args.diff))))
    return result.exit_code
