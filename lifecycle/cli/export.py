"""`lifecycle export PATH... --format chrome|otlp-json -o FILE`: the startup as a trace other tools open."""

from __future__ import annotations

import argparse
import sys

FORMATS = ("chrome", "otlp-json")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "export", help="write the startup as a Chrome/Perfetto trace or as OpenTelemetry spans (OTLP JSON)",
        description="chrome: Trace Event JSON for Perfetto UI and chrome://tracing (a .gz output is gzipped); "
                    "otlp-json: OpenTelemetry spans in the OTLP JSON encoding (needs the otel extra). "
                    "Exit status: 0 written, 2 the logs cannot be read or an extra is missing.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="rank-*.jsonl files or directories holding them")
    parser.add_argument("--format", choices=FORMATS, default="chrome")
    parser.add_argument("-o", "--output", required=True, help="file to write (chrome: .json or .json.gz)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from lifecycle.audit import EXIT_UNREADABLE, printable
    from lifecycle.errors import ExtraNotInstalled, LogUnreadable
    from lifecycle.export import load, write_chrome, write_otlp

    try:
        trace = load(args.paths)
        path = write_chrome(trace, args.output) if args.format == "chrome" else write_otlp(trace, args.output)
    except (LogUnreadable, ExtraNotInstalled) as exc:
        print(f"lifecycle export: {printable(str(exc))}", file=sys.stderr)
        return EXIT_UNREADABLE
    except OSError as exc:
        print(f"lifecycle export: cannot write {args.output!r}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    print(f"wrote {path} ({len(trace.ranks)} ranks, {args.format})")
    return 0
