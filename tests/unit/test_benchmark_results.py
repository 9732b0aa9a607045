"""docs/benchmarks.md's table is the one benchmarks/results.toml generates; every entry of the results file
names a benchmark script that exists and the command that runs it; a benchmark's `--record` rewrites its
own entry and leaves the others as they were."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


table = _module("results_table")
results = _module("_results")


def test_the_table_in_docs_benchmarks_md_is_the_one_the_results_file_generates() -> None:
    doc = (ROOT / "docs" / "benchmarks.md").read_text()
    assert table.START in doc, "docs/benchmarks.md lacks its generated table"
    assert table.with_table(doc, table.table(table.load())) == doc, "run: python benchmarks/results_table.py --write"


def test_every_entry_names_an_existing_script_and_the_command_that_runs_it() -> None:
    entries = table.load()
    assert len(entries) >= 11
    for entry in entries:
        assert (ROOT / entry["script"]).is_file(), entry["name"]
        assert entry["script"] == f"benchmarks/{entry['name']}.py", entry["name"]
        assert entry["command"].split()[:2] == ["python", entry["script"]], entry["command"]
        assert {"machine", "environment", "load", "date", "commit"} <= set(entry), entry["name"]
    assert len({e["name"] for e in entries}) == len(entries)


def test_each_benchmark_that_records_names_its_own_entry_and_takes_the_flag() -> None:
    entries = {e["name"]: e for e in table.load()}
    recorded = set()
    for script in sorted((ROOT / "benchmarks").glob("[!_]*.py")):
        for name in re.findall(r"\brecord\(\s*\"(\w+)\"", text := script.read_text()):
            assert entries[name]["script"] == f"benchmarks/{script.name}", (script.name, name)
            assert '"--record"' in text, script.name
            recorded.add(name)
    # every benchmark the table shows records itself, but faults.py (its bound differs per case)
    assert sorted(set(entries) - recorded) == ["faults"]


def test_the_table_shows_each_figure_and_command_and_no_date_or_load() -> None:
    entries = table.load()
    rows = table.table(entries).splitlines()[2:]
    assert len(rows) == len(entries)
    for row, entry in zip(rows, entries, strict=True):
        assert f"`{entry['command']}`" in row
        assert table.result(entry) in row
        assert "{" not in table.result(entry), entry["name"]
        assert not re.search(r"\b20\d\d-\d\d-\d\d\b|\bload\b", row), row
        assert max(len(cell.strip()) for cell in row.strip("|").split(" | ")) <= 400, row


def test_a_figure_the_result_cell_names_and_the_entry_lacks_is_refused_with_its_name() -> None:
    entry = {"name": "x", "shows": "{ratio:.2f}× ({low:.2f}–{high:.2f})", "figures": {"ratio": 1.0, "low": 0.9}}
    assert table.missing(entry) == ["high"]
    with pytest.raises(ValueError, match=r"x: shows names figures it lacks: \['high'\]"):
        table.result(entry)


def _copies(tmp_path: Path) -> tuple[Path, Path]:
    file, doc = tmp_path / "results.toml", tmp_path / "benchmarks.md"
    shutil.copy(table.RESULTS, file)
    shutil.copy(table.DOC, doc)
    return file, doc


def test_recording_rewrites_the_named_entry_and_its_row_and_keeps_the_others(tmp_path: Path) -> None:
    file, doc = _copies(tmp_path)
    before = table.load(file)
    engine = next(e for e in before if e["name"] == "engine")
    figures = {"ratio": 2.123456, "raw_us": 50.0, "engine_us": 106.0, "phases_ratio": 4.0}
    results.record("engine", figures, "python benchmarks/engine.py --repeats 2", file, doc)
    after = table.load(file)
    assert [e for e in after if e["name"] != "engine"] == [e for e in before if e["name"] != "engine"]
    new = next(e for e in after if e["name"] == "engine")
    assert new["figures"] == {**figures, "ratio": 2.123}
    assert new["command"] == "python benchmarks/engine.py --repeats 2"
    assert {k: new[k] for k in ("measures", "target", "shows")} == {
        k: engine[k] for k in ("measures", "target", "shows")
    }
    assert re.fullmatch(r"20\d\d-\d\d-\d\d", new["date"]) and new["commit"] and "note" not in new
    assert "| `python benchmarks/engine.py --repeats 2` |" in doc.read_text()
    assert "2.12× (raw 50 µs, engine 106 µs)" in doc.read_text()
    assert table.with_table(doc.read_text(), table.table(after)) == doc.read_text()


def test_a_record_that_lacks_a_figure_or_names_no_entry_writes_nothing(tmp_path: Path) -> None:
    file, doc = _copies(tmp_path)
    kept = file.read_text(), doc.read_text()
    with pytest.raises(ValueError, match=r"engine: shows names figures it lacks: \['phases_ratio'\]"):
        results.record(
            "engine", {"ratio": 2.0, "raw_us": 50.0, "engine_us": 100.0}, "python benchmarks/engine.py", file, doc
        )
    with pytest.raises(ValueError, match="no entry 'nope'"):
        results.record("nope", {}, "python benchmarks/nope.py", file, doc)
    assert (file.read_text(), doc.read_text()) == kept


def test_the_recorded_command_is_the_scripts_with_its_flags_less_record() -> None:
    argv = ["/x/benchmarks/audit.py", "--repeat", "3", "--record", "--ranks", "64"]
    assert results.command(argv) == "python benchmarks/audit.py --repeat 3 --ranks 64"


def test_a_page_without_the_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="markers"):
        table.with_table("# Benchmarks\n", "| table |")
