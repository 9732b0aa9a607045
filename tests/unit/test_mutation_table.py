"""docs/testing.md's mutation table is the one scripts/mutation-results.toml generates, and the results file
speaks only of modules and mistakes scripts/mutation.toml has, with counts that add up."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]


def _table_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutation_table", ROOT / "scripts" / "mutation_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mutation_table", module)
    spec.loader.exec_module(module)
    return module


table = _table_module()


def test_the_table_in_docs_testing_md_is_the_one_the_results_file_generates() -> None:
    doc = (ROOT / "docs" / "testing.md").read_text()
    generated = table.table(table.load(), table.modules_of())
    assert table.with_table(doc, generated) == doc, "run: python scripts/mutation_table.py --write"


def test_a_changed_count_in_the_results_file_changes_the_table(tmp_path: Path) -> None:
    results = table.load()
    results["module"][0] = {**results["module"][0], "killed": results["module"][0]["killed"] - 1}
    file = tmp_path / "results.toml"
    file.write_text(table.dump(results))
    doc = (ROOT / "docs" / "testing.md").read_text()
    assert table.with_table(doc, table.table(table.load(file), table.modules_of())) != doc


def test_every_module_and_mistake_of_the_results_is_in_mutation_toml_and_its_counts_add_up() -> None:
    config = tomllib.loads((ROOT / "scripts" / "mutation.toml").read_text())
    results = table.load()
    names = {m["name"] for m in config["module"]}
    assert [r["name"] for r in results["module"] if r["name"] not in names] == []
    assert [m["what"] for m in results["mistake"]] == [m["what"] for m in config["mistake"]]
    assert [r["name"] for r in results["module"] if r["killed"] + r["equivalent"] + r["survived"] != r["mutants"]] == []


def test_a_module_without_a_result_reads_not_run_and_the_score_leaves_out_the_equivalents() -> None:
    results = {"module": [{"name": "a", "mutants": 10, "killed": 6, "equivalent": 2, "survived": 2}], "mistake": []}
    rows = table.table(results, ["a", "b"]).splitlines()
    assert rows[2] == "| a | 10 | 6 | 2 | 2 | 75.0 % |  |"
    assert rows[3] == "| b | | | | | not run | |"


def test_recording_replaces_the_modules_run_and_keeps_the_others(tmp_path: Path) -> None:
    file = tmp_path / "results.toml"
    old = {"name": "a", "mutants": 3, "killed": 1, "equivalent": 0, "survived": 2, "note": 'x "quoted"'}
    kept = {"name": "b", "mutants": 1, "killed": 1, "equivalent": 0, "survived": 0}
    file.write_text(table.dump({"module": [old, kept], "mistake": [{"name": "a", "what": "w", "outcome": "not run"}]}))
    new = {"name": "a", "mutants": 3, "killed": 3, "equivalent": 0, "survived": 0}
    table.record([new], [{"name": "a", "what": "w", "outcome": "caught"}], file)
    assert table.load(file) == {"module": [new, kept], "mistake": [{"name": "a", "what": "w", "outcome": "caught"}]}


def test_a_page_without_the_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="markers"):
        table.with_table("# Testing\n", "| table |")
