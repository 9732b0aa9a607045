"""`lifecycle graph`: the state diagram, generated from the transition table."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("graph", help="print the state diagram generated from the transition table")
    parser.add_argument("--format", choices=("mermaid",), default="mermaid")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from lifecycle.diagram import mermaid

    print(mermaid())
    return 0
