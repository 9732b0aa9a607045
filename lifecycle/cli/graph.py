"""`lifecycle graph`: the state diagram, generated from the transition table."""

from __future__ import annotations

import argparse
import sys

from lifecycle.cli._lines import tell


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("graph", help="print the state diagram generated from the transition table")
    parser.add_argument(
        "--format",
        choices=("mermaid", "dot", "svg", "markdown"),
        default="mermaid",
        help="mermaid (default), dot (Graphviz text), svg (needs matplotlib), markdown (docs/state-diagram.md)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from lifecycle.errors import ExtraNotInstalled
    from lifecycle.export import diagram

    render = {"mermaid": diagram.mermaid, "dot": diagram.dot, "svg": diagram.svg, "markdown": diagram.markdown}[
        args.format
    ]
    try:
        text = render()
    except ExtraNotInstalled as exc:
        tell("graph", exc)
        return 2
    sys.stdout.write(text)
    return 0
