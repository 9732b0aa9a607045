"""The export decodes the logs once: what the audit's taps keep of each rank file is what a second
read of the file finds, and the Chrome trace is the same bytes as one built from a second read."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.audit import ChainWriter, rank_records, write_run
from lifecycle.audit import audit_tapped
from lifecycle.export import Collect, load
from lifecycle.testing import read_details, write_chrome


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 ranks with the audit benchmark's faults (a rank that died, a tampered loss, a straggler, a
    wrong target), a log cut in the middle of its last line, and two whose next-to-last step has no
    number and no loss and a time in whole seconds (one with non-ASCII text: read by orjson, not
    typed; the other typed, its batch's steps kept one by one)."""
    logs = tmp_path_factory.mktemp("faulty")
    write_run(logs, 24, steps=6)
    cut = logs / "rank-00003.jsonl"
    cut.write_bytes(cut.read_bytes()[:-40])
    for rank, note in ((24, "déjà"), (25, "ascii")):  # orjson reads the first's batch, msgspec the other's
        w = ChainWriter("bench", rank, 26)
        rank_records(w, 1.7e9, steps=4, slow=1.0, fault=None)
        w.emit(1.7e9 + 50, "step_completed", loss=None, duration_s=2, note=note)
        w.emit(1.7e9 + 51, "step_completed", step=10, loss=2, duration_s=0.5)
        (logs / f"rank-{rank:05d}.jsonl").write_bytes(b"".join(w.lines))
    return logs


def test_the_taps_keep_what_a_second_read_finds(faulty: Path) -> None:
    result, taps = audit_tapped([str(faulty)], Collect)
    assert not result.errors and result.findings
    assert len(taps) == 26
    kept = {tap.source: tap.out for tap in taps if isinstance(tap, Collect)}
    assert len(kept) == 26
    for source, found in kept.items():
        assert found == read_details(source, configs=False), source
    for rank in (24, 25):
        steps = kept[str(faulty / f"rank-{rank:05d}.jsonl")][rank].steps
        assert steps[-2:] == [(1.7e9 + 50, 0, None, 2.0), (1.7e9 + 51, 10, 2.0, 0.5)]


def _read_again(self: Collect, source: str) -> None:
    """The export as it was: each file read again after the audit (the taps see nothing)."""
    self.source = source
    self.out = read_details(source, configs=False)


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_chrome_trace_is_the_one_a_second_read_gives(
    faulty: Path, tmp_path: Path, jobs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    once = write_chrome(load([str(faulty)], jobs=jobs), tmp_path / "once.json").read_bytes()
    monkeypatch.setattr(Collect, "__init__", _read_again)
    monkeypatch.setattr(Collect, "__call__", lambda self, lines, recs: None)
    twice = write_chrome(load([str(faulty)], jobs=jobs), tmp_path / "twice.json").read_bytes()
    assert once == twice
    assert b'"cat":"finding"' in once or b'"cat":"violation"' in once
