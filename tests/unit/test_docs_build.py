"""The docs build with `mkdocs build --strict` (mkdocs.yml): every page in the nav, every link to a
page and to an anchor resolves. The site is written to a temporary folder, never into the checkout."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
    reason="mkdocs and mkdocs-material are not installed (pip install -e '.[dev]')",
)


def _build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"), "-d", str(site)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )


def test_the_docs_build_strict_with_every_link_and_anchor_found(tmp_path: Path) -> None:
    done = _build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "index.html").is_file()


def test_a_broken_anchor_and_a_missing_page_fail_the_build_each_named(tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    index = copy / "docs" / "index.md"
    index.write_text(index.read_text() + "\n[gone](engine.md#no-such-heading) [gone](no-such-page.md)\n")
    done = _build(copy, tmp_path / "site")
    warned = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("WARNING")]
    assert done.returncode != 0
    assert any("no-such-heading" in line for line in warned), warned
    assert any("no-such-page.md" in line for line in warned), warned
