"""What importing the packages costs and pulls in: the layers seen from a fresh interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "megatron", "transformers", "transformer_engine")


def _loaded_after(statement: str) -> list[str]:
    code = f"import sys; {statement}; print(sorted({{m.split('.')[0] for m in sys.modules}}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return list(ast.literal_eval(out.stdout.strip()))


def test_importing_the_packages_pulls_in_neither_torch_nor_megatron() -> None:
    loaded = _loaded_after(
        "import lifecycle, states, bindings, lifecycle.cli, lifecycle.log, lifecycle.core_entry, "
        "lifecycle.audit, lifecycle.rankwatch, lifecycle.testing, lifecycle.export.diagram"
    )
    assert [m for m in loaded if m in HEAVY] == []


def test_importing_bindings_loads_only_states_of_the_project() -> None:
    loaded = _loaded_after("import bindings")
    assert "lifecycle" not in loaded
    assert [m for m in loaded if m in ("transitions", "structlog", "orjson", *HEAVY)] == []


def test_importing_states_loads_nothing_else_of_the_project() -> None:
    loaded = _loaded_after("import states")
    assert "lifecycle" not in loaded and "bindings" not in loaded


def _imported_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module in ("lifecycle", "lifecycle.core_entry"):
            names.add("lifecycle.core_entry")
    return names


def test_unit_tests_import_neither_torch_nor_megatron() -> None:
    """tests/unit is the fast layer: heavy tests live in tests/integration (marked slow)."""
    offenders = {}
    for path in sorted((ROOT / "tests" / "unit").rglob("*.py")):
        heavy = _imported_names(path) & {"torch", "megatron"}
        if heavy:
            offenders[str(path.relative_to(ROOT))] = sorted(heavy)
    assert offenders == {}


def test_unit_test_modules_load_neither_torch_nor_megatron_when_imported() -> None:
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "tests" / "unit").rglob("test_*.py")
    )
    paths = [str(ROOT), str(ROOT / "tests" / "unit" / "audit")]
    loaded = _loaded_after(f"sys.path[:0] = {paths!r}; " + "; ".join(f"import {m}" for m in modules))
    assert [m for m in loaded if m in ("torch", "megatron")] == []
