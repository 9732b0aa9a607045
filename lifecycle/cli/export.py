"""`lifecycle export PATH... --format chrome|otlp-json -o FILE`: the startup as a trace other tools open."""

from __future__ import annotations

import argparse
import math

from lifecycle.cli._lines import tell

FORMATS = ("chrome", "otlp-json")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "export",
        help="write the startup as a Chrome/Perfetto trace or as OpenTelemetry spans (OTLP JSON)",
        description="chrome: Trace Event JSON for Perfetto UI and chrome://tracing (a .gz output is gzipped); "
        "otlp-json: OpenTelemetry spans in the OTLP JSON encoding (needs the otel extra). "
        "Exit status: 0 written, 2 the logs cannot be read or an extra is missing.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="rank-*.jsonl files or directories holding them")
    parser.add_argument("--format", choices=FORMATS, default="chrome")
    parser.add_argument("-o", "--output", required=True, help="file to write (chrome: .json or .json.gz)")
    parser.add_argument(
        "--follow",
        action="store_true",
        help="otlp-json only: follow DIR while the run goes, appending each span as it ends "
        "(one OTLP JSON request per line), until every rank is done",
    )
    parser.add_argument(
        "--idle-timeout",
        type=seconds,
        default=300.0,
        metavar="S",
        help="with --follow: stop after S seconds with no new record (default 300)",
    )
    parser.set_defaults(func=run)


def seconds(text: str) -> float:
    """argparse type for `--idle-timeout`: a finite number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; write e.g. --idle-timeout 300") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} must be a finite number of seconds, 0 or more; write e.g. --idle-timeout 300"
        )
    return value


def run(args: argparse.Namespace) -> int:
    from lifecycle.audit import EXIT_UNREADABLE, printable
    from lifecycle.errors import ExtraNotInstalled, LogUnreadable
    from lifecycle.export import follow, load, write_chrome, write_otlp

    if args.follow:
        if args.format != "otlp-json" or len(args.paths) != 1:
            tell("export", "--follow takes one log directory and --format otlp-json")
            return EXIT_UNREADABLE
        try:
            count = follow(args.paths[0], args.output, idle_timeout_s=args.idle_timeout)
        except ExtraNotInstalled as exc:
            tell("export", exc)
            return EXIT_UNREADABLE
        except LogUnreadable as exc:
            tell("export", exc)
            return EXIT_UNREADABLE
        except OSError as exc:
            return cannot_write(args.output, exc)
        print(f"wrote {count} spans to {printable(str(args.output))}")
        return 0
    try:
        trace = load(args.paths)
        path = write_chrome(trace, args.output) if args.format == "chrome" else write_otlp(trace, args.output)
    except (LogUnreadable, ExtraNotInstalled) as exc:
        tell("export", exc)
        return EXIT_UNREADABLE
    except OSError as exc:
        return cannot_write(args.output, exc)
    print(f"wrote {printable(str(path))} ({len(trace.ranks)} ranks, {args.format})")
    return 0


def cannot_write(output: str, exc: OSError, command: str = "export") -> int:
    """One line on stderr: the output that was not written, and why (a full disk, a link, not ours)."""
    from lifecycle.audit import EXIT_UNREADABLE

    tell(command, f"cannot write {output!r}: {exc.strerror or exc}")
    return EXIT_UNREADABLE
