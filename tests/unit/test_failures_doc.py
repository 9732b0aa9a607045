"""docs/failures.md says what each process failure looks like: every section about one names the
tests that check it, every test it names exists, and every number it gives is the code's."""

from __future__ import annotations

import ast
import re
import signal
from pathlib import Path

import pytest

from lifecycle.audit import RULES
from lifecycle.rankwatch import EXIT_CODE, RankWatch, WatchSettings
from lifecycle.runtime.signals import GRACE_S

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "failures.md").read_text()
PROCESS_SECTIONS = (
    "## SIGTERM or SIGINT during startup",
    "## SIGTERM or SIGINT during `shutdown()`",
    "## The launcher is stopped or killed",
    "## `shutdown()` from another thread, or never called",
    "### Measured",
)


def _section(title: str) -> str:
    start = DOC.index(title)
    end = DOC.find("\n#", start + len(title))
    return DOC[start : end if end != -1 else len(DOC)]


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


@pytest.mark.parametrize("title", PROCESS_SECTIONS)
def test_every_process_failure_section_names_the_tests_that_check_it(title: str) -> None:
    assert "Checked by:" in _section(title)


def test_every_test_the_doc_names_exists_in_the_file_it_names() -> None:
    named = re.findall(r"`(tests/[\w/]+\.py)::(test_\w+)`", DOC)
    assert len(named) >= 8
    for path, name in named:
        assert name in _tests_in(ROOT / path), f"{path}::{name}"
    everywhere = set().union(*(_tests_in(p) for p in (ROOT / "tests").rglob("test_*.py")))
    for name in re.findall(r"`(test_\w+)`", DOC):
        assert name in everywhere, name


def test_the_numbers_the_doc_gives_are_the_codes() -> None:
    watch = RankWatch(object(), rank=0, world_size=2, settings=WatchSettings(timeout_s=600.0))
    assert f"exit status **{EXIT_CODE}** (`EXIT_CODE`)" in DOC
    assert "3 s (`grace_s`; 1 s when the peer is `lost`)" in DOC and watch.grace_s == 3.0
    assert "every 0.5 s" in DOC and watch.poll_s == 0.5
    assert "after 1 s (`lost_s`)" in DOC and watch.lost_s == 1.0
    assert "`stale_s = clamp(timeout_s / 4, 5 s, 8 s)`" in DOC
    for timeout_s in (1.0, 20.0, 26.0, 600.0):
        stale_s = RankWatch(object(), rank=0, world_size=2, settings=WatchSettings(timeout_s=timeout_s)).stale_s
        assert stale_s == min(8.0, max(5.0, timeout_s / 4))
    assert "A rank whose watcher thread is starved of the GIL for `stale_s` (8 s)" in DOC
    assert "`timeout_s + 3 s` after it began" in DOC  # the collective states' backstop: timeout_s + grace_s
    assert "**3 s** later (`GRACE_S`)" in DOC and GRACE_S == 3.0  # a signal the main thread cannot take
    for name, code in (("SIGTERM", 143), ("SIGINT", 130)):
        assert 128 + signal.Signals[name] == code and str(code) in _section("## The launcher is stopped or killed")
    assert "(exit 130).`" in _section("## SIGTERM or SIGINT during `shutdown()`")
    incomplete = {r.id: r.slug for r in RULES}["LA021"]
    assert f"[LA021](rules/LA021.md) {incomplete}" in DOC


def test_the_measured_table_has_a_row_for_every_fault_case_of_the_benchmark() -> None:
    from benchmarks.faults import CASES

    table = _section("### Measured")
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| case")]
    assert len([r for r in rows if not r.startswith("|---")]) == len(CASES)
