"""The state diagram, generated from `states.TABLE` (the one source of truth).

`mermaid()` comes from `transitions`' own diagram support (GraphMachine, mermaid engine); `dot()` is
Graphviz text written here (rendering it needs the `dot` binary, which this package does not
assume); `svg()` draws the same graph with matplotlib (the `plot` extra). `markdown()` is
docs/state-diagram.md, kept equal to it by a test.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from lifecycle.errors import ExtraNotInstalled
from states import STARTUP_ORDER, TABLE, State, Transition

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

TITLE = "megatron-lifecycle startup"
FORMATS = ("mermaid", "dot", "svg", "markdown")


def _label(row: Transition) -> str:
    guards = " & ".join(g.__name__ for g in row.guards)
    return row.trigger.value + (f" [{guards}]" if guards else "")


def edges() -> list[tuple[str, str, str]]:
    """(source, dest, label) for every source of every row, in table order."""
    return [(source.name, row.dest.name, _label(row)) for row in TABLE for source in row.sources]


def mermaid() -> str:
    """A mermaid `stateDiagram-v2`, drawn by `transitions`' GraphMachine from the table."""
    from transitions.extensions.diagrams import GraphMachine

    class _Model:
        pass

    machine = GraphMachine(
        model=_Model(),
        states=[s.name for s in State],
        initial=STARTUP_ORDER[0].name,
        auto_transitions=False,
        graph_engine="mermaid",
        show_conditions=True,
        title=f"title: {TITLE}",  # transitions writes the title line as is into mermaid's front matter
    )
    for row in TABLE:
        machine.add_transition(
            row.trigger.value, [s.name for s in row.sources], row.dest.name, conditions=[g.__name__ for g in row.guards]
        )
    text: str = machine.get_graph().draw(None)
    # Drop the styling of the model's current state: a static diagram has none (and mermaid spells
    # the statement `class`, not the `Class` transitions 0.9 writes).
    kept = [line.rstrip() for line in text.splitlines() if not line.lstrip().startswith(("classDef", "Class "))]
    return "\n".join(kept).strip() + "\n"


def dot() -> str:
    """Graphviz `digraph` text: startup states in order, FAILED and SHUT_DOWN beside them."""
    lines = [
        "digraph lifecycle {",
        f'  label="{TITLE}"; labelloc=t; rankdir=TB;',
        "  node [shape=box, style=rounded];",
        "  start [shape=point];",
        f"  start -> {STARTUP_ORDER[0].name};",
    ]
    lines += [f"  {s.name};" for s in State]
    lines.append(f"  {{ rank=same; {State.FAILED.name}; {State.DISTRIBUTED.name}; }}")
    for source, dest, label in edges():
        lines.append(f'  {source} -> {dest} [label="{label}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def markdown() -> str:
    """docs/state-diagram.md: the mermaid diagram and the table it is drawn from."""
    rows = ["| trigger | from | to | guards | what it does |", "|---|---|---|---|---|"]
    for row in TABLE:
        guards = ", ".join(g.__name__ for g in row.guards) or "—"
        sources = ", ".join(s.name for s in row.sources)
        rows.append(f"| `{row.trigger.value}` | {sources} | {row.dest.name} | {guards} | {row.doc} |")
    return "\n".join(
        [
            "# State diagram",
            "",
            "For anyone driving or reading a lifecycle: which transitions exist, from which states, under",
            "which guards. Generated from `states.TABLE` (`lifecycle graph --format markdown`), so it is",
            "always the table the engine runs; `lifecycle graph --format dot` and `--format svg` draw the same graph.",
            "",
            "```mermaid",
            mermaid().rstrip(),
            "```",
            "",
            *rows,
            "",
        ]
    )


def svg() -> str:
    """The diagram drawn with matplotlib: startup states down the left, FAILED and SHUT_DOWN right."""
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ExtraNotInstalled(
            "lifecycle graph --format svg needs matplotlib: pip install megatron-lifecycle[plot]", extra="plot"
        ) from exc
    figure = Figure(figsize=(9, 8))
    ax = figure.add_axes((0, 0, 1, 1))
    ax.set_xlim(-4.2, 5.2)
    ax.set_ylim(-7.2, 1.0)
    ax.axis("off")
    pos = _positions()
    for state, (x, y) in pos.items():
        ax.text(
            x,
            y,
            state,
            ha="center",
            va="center",
            fontsize=9,
            zorder=3,
            bbox={"boxstyle": "round,pad=0.4", "fc": "#eef3fb" if state != "FAILED" else "#fbeaea"},
        )
    for (source, dest), labels in _grouped().items():
        _arrow(ax, pos, source, dest, labels)
    fx, fy = pos[State.FAILED.name]
    sx, sy = pos[State.SHUT_DOWN.name]
    ax.text(fx, fy - 0.5, "fail: from any startup state", ha="center", fontsize=7)
    ax.text(sx, sy - 0.5, "shutdown: from any state", ha="center", fontsize=7)
    ax.text(0.5, 0.8, TITLE, ha="center", fontsize=11)
    return _save(figure, "svg")


def _save(figure: Figure, fmt: str) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format=fmt, metadata={"Date": None} if fmt == "svg" else None)
    return buffer.getvalue().decode() if fmt == "svg" else buffer.getvalue().hex()


def _positions() -> dict[str, tuple[float, float]]:
    pos = {s.name: (0.0, -1.2 * i) for i, s in enumerate(STARTUP_ORDER)}
    pos[State.FAILED.name] = (3.6, -2.4)
    pos[State.SHUT_DOWN.name] = (3.6, -6.6)
    return pos


def _grouped() -> dict[tuple[str, str], list[str]]:
    grouped: dict[tuple[str, str], list[str]] = {}
    for source, dest, _ in edges():
        trigger = next(r.trigger.value for r in TABLE if r.dest.name == dest and source in (s.name for s in r.sources))
        grouped.setdefault((source, dest), []).append(trigger)
    return grouped


def _arrow(ax: Axes, pos: dict[str, tuple[float, float]], source: str, dest: str, labels: list[str]) -> None:
    from matplotlib.patches import FancyArrowPatch

    (x0, y0), (x1, y1) = pos[source], pos[dest]
    backwards = x0 == x1 and y1 > y0
    rad = -0.55 if backwards and labels[0] == "restart" else (-0.35 if backwards else 0.0)
    if source == State.FAILED.name and dest != State.SHUT_DOWN.name:
        rad = 0.3  # restart from FAILED: bend it off the fail arrows it would cover
    side = -1 if backwards else 1
    ax.add_patch(
        FancyArrowPatch(
            (x0 + (0.0 if not backwards else -0.5), y0),
            (x1 - (0.5 if backwards else 0), y1),
            connectionstyle=f"arc3,rad={rad}",
            arrowstyle="-|>",
            mutation_scale=10,
            shrinkA=14,
            shrinkB=14,
            color="#555555",
            lw=0.8,
        )
    )
    if dest in (State.FAILED.name, State.SHUT_DOWN.name):
        return  # one label per target, drawn below
    mx = (x0 + x1) / 2 + side * (0.15 + (1.3 if labels[0] == "restart" else 0.7 if backwards else 0))
    my = (y0 + y1) / 2 + (0.75 if source == State.FAILED.name else 0.0)
    ax.text(mx, my, "/".join(labels), fontsize=7, ha="left" if side > 0 else "right", va="center")
