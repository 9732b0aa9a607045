"""pytest imports test modules by their file name (rootdir-relative packages aside): two test files
of one name in different folders break the whole suite's collection. One name, one file."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_two_test_files_share_a_name() -> None:
    names = Counter(p.name for p in (ROOT / "tests").rglob("test_*.py"))
    assert [name for name, n in names.items() if n > 1] == []
