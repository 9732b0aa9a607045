"""`lifecycle graph`: every format draws exactly the table's edges, and docs/state-diagram.md is
the generated file, byte for byte."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lifecycle.cli import main
from lifecycle.export import diagram
from states import STARTUP_ORDER, TABLE, State

DOC = Path(__file__).resolve().parents[3] / "docs" / "state-diagram.md"
TABLE_EDGES = {(s.name, r.dest.name, r.trigger.value) for r in TABLE for s in r.sources}


def test_the_state_diagram_in_docs_is_the_one_generated_from_the_table() -> None:
    assert DOC.read_text() == diagram.markdown(), (
        "docs/state-diagram.md is stale: run `lifecycle graph --format markdown > docs/state-diagram.md`"
    )


def test_mermaid_has_exactly_one_edge_per_source_and_row() -> None:
    found = {(a, b, t) for a, b, t in re.findall(r"^\s+(\w+) --> (\w+): (\w+)", diagram.mermaid(), re.M)}
    assert found == TABLE_EDGES
    assert "[*] --> CONFIGURED" in diagram.mermaid()


def test_mermaid_labels_carry_the_guards() -> None:
    before = STARTUP_ORDER[State.CALLBACKS_BOUND.startup_index - 1]  # MODEL_BUILT, or a state added after it
    edge = f"{before.name} --> CALLBACKS_BOUND: bind_callbacks [model_is_built & plan_reaches_destination]"
    assert edge in diagram.mermaid()


def test_dot_has_exactly_the_tables_edges() -> None:
    found = {(a, b, t) for a, b, t in re.findall(r"^\s+(\w+) -> (\w+) \[label=\"(\w+)", diagram.dot(), re.M)}
    assert found == TABLE_EDGES
    assert diagram.dot().count("{") == diagram.dot().count("}")


def test_svg_draws_every_state(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    assert main(["graph", "--format", "svg"]) == 0
    svg = capsys.readouterr().out
    assert svg.startswith("<?xml") and svg.rstrip().endswith("</svg>")
    assert all(f"<!-- {s.name} -->" in svg for s in State)


def test_the_cli_prints_each_format(capsys: pytest.CaptureFixture[str]) -> None:
    for fmt, marker in (("mermaid", "stateDiagram-v2"), ("dot", "digraph lifecycle"), ("markdown", "# State diagram")):
        assert main(["graph", "--format", fmt]) == 0
        assert marker in capsys.readouterr().out
