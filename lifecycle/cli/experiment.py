"""`lifecycle experiment grad-sync`: why callbacks must be bound to the scheduler's config."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lifecycle.log import JSONValue


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("experiment", help="run an experiment on local CPU ranks")
    which = parser.add_subparsers(dest="experiment", metavar="EXPERIMENT", required=True)
    grad = which.add_parser(
        "grad-sync",
        help="DP=2 and TP=2 on 2 gloo ranks: callbacks on the provider's config vs the scheduler's config",
    )
    grad.add_argument("--format", choices=("table", "json"), default="table")
    grad.set_defaults(func=run_grad_sync)


def table(rows: Sequence[Mapping[str, JSONValue]]) -> str:
    """A plain-text table, one line per (case, binding); list values are per rank."""
    head = ("case", "binding", "finalizer calls", "increased", "decreased", "stayed", "owned grad", "replicas equal")
    lines: list[tuple[JSONValue, ...]] = [head]
    for row in rows:
        lines.append(
            (
                row["case"],
                row["binding"],
                _ranks(row["finalizer_calls"]),
                _ranks(row["increased"]),
                _ranks(row["decreased"]),
                _ranks(row["stayed"]),
                _ranks(["/".join(f"{v:g}" for v in _items(g)) for g in _items(row["owned_grad"])]),
                "yes" if row["replicas_identical"] else "no",
            )
        )
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    out = ["  ".join(str(v).ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out) + "\n(values per rank: rank 0 / rank 1)"


def _ranks(values: JSONValue) -> str:
    return " / ".join(str(v) for v in _items(values))


def _items(values: JSONValue) -> Iterable[JSONValue]:
    """A row's per-rank values (a list in the experiment's rows)."""
    if not isinstance(values, Iterable):
        raise TypeError(f"expected per-rank values, got {values!r}")
    return values


def run_grad_sync(args: argparse.Namespace) -> int:
    from lifecycle.experiments import grad_sync

    rows = grad_sync.run()
    if args.format == "json":
        print(json.dumps({"experiment": "grad-sync", "rows": rows}, indent=2))
    else:
        print(table(rows))
    return 0
