"""The state diagram, generated from `states.TABLE` (the one source of truth)."""

from __future__ import annotations

from states import STARTUP_ORDER, TABLE, State


def mermaid() -> str:
    """A mermaid `stateDiagram-v2` with one edge per (source, trigger) row of the table."""
    lines = ["stateDiagram-v2", f"    [*] --> {STARTUP_ORDER[0].name}"]
    for row in TABLE:
        guards = ", ".join(g.__name__ for g in row.guards)
        label = row.trigger.value + (f" [{guards}]" if guards else "")
        for source in row.sources:
            lines.append(f"    {source.name} --> {row.dest.name}: {label}")
    lines.append(f"    {State.SHUT_DOWN.name} --> [*]")
    return "\n".join(lines)
