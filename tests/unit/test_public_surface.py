"""The packages publish at most 200 names, so that an internal is not published for a test's sake:
a test takes it from `lifecycle.testing` (the count and the rule are in docs/architecture.md).

Counted: the literal entries of `__all__` in every public module of states, bindings and lifecycle
(no `_private` part in its path), except `lifecycle.testing`, which hands tests the internals and
promises nothing. Three `__all__` are computed, not listed, and count as the names they stand for
elsewhere: `lifecycle.log.events` (its event-name constants, the log's vocabulary, counted as the one
name `events` in `lifecycle.log`), `lifecycle.log.records` (one record type per event, the log's
format, counted as the one name `records` there) and `lifecycle`'s `+= errors.__all__` (the error
tree, counted in `lifecycle.errors`).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CAP = 200
NOT_COUNTED = ("lifecycle.testing",)
COMPUTED = {"lifecycle.log.events", "lifecycle.log.records", "lifecycle"}
# Each module's count when the cap was set: what a failure compares against.
SET_AT = {
    "bindings": 29,
    "lifecycle": 16,
    "lifecycle.audit": 13,
    "lifecycle.config": 11,
    "lifecycle.engine": 4,
    "lifecycle.errors": 21,
    "lifecycle.export": 4,
    "lifecycle.launchers": 6,
    "lifecycle.log": 5,
    "lifecycle.log.schema": 2,
    "lifecycle.core_entry": 2,
    "lifecycle.core_entry.train": 4,
    "lifecycle.lm_dropin": 1,
    "lifecycle.lm_dropin.entry": 2,
    "lifecycle.redaction": 3,
    "lifecycle.resilience": 4,
    "lifecycle.resume": 1,
    "lifecycle.runtime": 1,
    "lifecycle.simulate": 8,
    "states": 25,
}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _public_modules() -> list[tuple[str, Path]]:
    found = []
    for package in ("states", "bindings", "lifecycle"):
        for path in sorted((ROOT / package).rglob("*.py")):
            name = _module(path)
            private = any(p.startswith("_") for p in name.split("."))
            if not private and not name.startswith(NOT_COUNTED):
                found.append((name, path))
    return found


def _all_entries(path: Path) -> tuple[int, list[str]]:
    """The literal `__all__` entries of a module, and the source of any `__all__` it computes."""
    count, computed = 0, []
    for node in ast.parse(path.read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if not (isinstance(target, ast.Name) and target.id == "__all__"):
            continue
        value = getattr(node, "value", None)
        if isinstance(value, (ast.List, ast.Tuple)):
            count += len(value.elts)
        elif value is not None:
            computed.append(ast.unparse(value))
    return count, computed


def public_surface() -> dict[str, int]:
    """Module -> the names its `__all__` lists (modules that list none left out)."""
    counts = {}
    for name, path in _public_modules():
        count, _ = _all_entries(path)
        if count:
            counts[name] = count
    return counts


def test_the_packages_publish_at_most_200_names() -> None:
    counts = public_surface()
    total = sum(counts.values())
    grew = {m: f"{SET_AT.get(m, 0)} -> {n}" for m, n in counts.items() if n > SET_AT.get(m, 0)}
    assert total <= CAP, (
        f"{total} public names, over {CAP}; grown since the cap was set: {grew}. A name only tests use "
        "goes in lifecycle.testing; one only a sibling package uses is re-exported as `name as name`"
    )


def test_no_module_computes_its_public_names_except_the_three_counted_elsewhere() -> None:
    computed = {name for name, path in _public_modules() if _all_entries(path)[1]}
    assert computed == COMPUTED


def test_the_count_reads_every_form_of_all(tmp_path: Path) -> None:
    path = tmp_path / "probe.py"
    path.write_text('__all__ = ["a", "b"]\n__all__ += ("c",)\n__all__ += other.__all__\nx: list[str] = []\n')
    assert _all_entries(path) == (3, ["other.__all__"])
