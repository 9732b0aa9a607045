"""`lifecycle report` rendered by a real browser: headless Chromium loads report.html from disk,
with no console error, a timeline row for every rank of a 2-rank run, and the root cause of a
failed run on the page. Screenshots go to $LIFECYCLE_ARTIFACTS (default: the test's tmp dir).

Chromium comes from Debian's `chromium` package (`scripts/browser-deps` installs it)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "export"))

from browser import Browser, chromium
from export_logs import clean_2_ranks, failed_run

from lifecycle.cli import main

EXECUTABLE = chromium()
pytestmark = pytest.mark.skipif(
    EXECUTABLE is None,
    reason="chromium is not installed: run scripts/browser-deps (apt-get install chromium) to run the browser test",
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    pytest.importorskip("websockets", reason="the DevTools client needs websockets (dev extra)")
    assert EXECUTABLE is not None
    session = Browser(EXECUTABLE)
    try:
        yield session
    finally:
        session.close()


def artifacts(tmp_path: Path) -> Path:
    where = Path(os.environ.get("LIFECYCLE_ARTIFACTS", tmp_path))
    where.mkdir(parents=True, exist_ok=True)
    return where


def render(browser: Browser, logs: Path, out: Path) -> None:
    assert main(["report", str(logs), "-o", str(out)]) == 0
    browser.errors.clear()
    browser.load(out)
    assert browser.evaluate("document.body.dataset.rendered") == "yes", browser.errors
    assert browser.errors == []


def test_every_rank_of_a_2_rank_run_has_a_timeline_row(browser: Browser, tmp_path: Path) -> None:
    logs = clean_2_ranks(tmp_path / "logs")
    render(browser, logs, tmp_path / "clean.html")
    labels = browser.evaluate("[...document.querySelectorAll('#rows .row-label')].map(e => e.textContent)")
    assert labels == ["rank 0", "rank 1"]
    drawn = browser.evaluate(
        "(() => { const c = document.getElementById('canvas');"
        " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        " let n = 0;"
        " for (let i = 0; i < d.length; i += 4) if (d[i + 3] && d[i] < 200) n++;"
        " return [c.height > 0, n]; })()"
    )
    assert drawn[0] and drawn[1] > 500  # the state bars are painted
    assert "No rank's startup failed." in browser.evaluate("document.getElementById('root-cause').textContent")
    browser.screenshot(artifacts(tmp_path) / "report-clean-2-ranks.png")


def test_a_failed_run_shows_its_root_cause_and_victims(browser: Browser, tmp_path: Path) -> None:
    logs = failed_run(tmp_path / "logs")
    render(browser, logs, tmp_path / "failed.html")
    cause = browser.evaluate("document.getElementById('root-cause').textContent")
    assert "rank 2" in cause and "CUDA out of memory" in cause
    victims = browser.evaluate("[...document.querySelectorAll('#root-cause td:first-child')].map(e => e.textContent)")
    assert victims == ["0", "1", "3"]
    links = browser.evaluate("[...document.querySelectorAll('#findings a')].map(a => a.getAttribute('href'))")
    assert "docs/rules/LA018.md" in links
    browser.evaluate("document.getElementById('zoom-in').click()")  # zooming redraws without an error
    assert browser.errors == []
    browser.screenshot(artifacts(tmp_path) / "report-failed-run.png")
