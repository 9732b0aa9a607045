"""Impossible timestamps (before 2000, after 2100, a step back of more than a minute) are LA022, read the same by the
batch reader and record by record; `export` (Chrome, OTLP) and `report` still write such a log."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson
import pytest
from audit_logs import clean_events, index, rechain, write_events

from lifecycle.audit import audit
from lifecycle.cli import main


def edited(tmp_path: Path, edit: Any) -> Path:
    path = write_events(tmp_path, clean_events())
    rechain(path, edit)
    return path


def rules_of(path: Path) -> dict[str, int]:
    return {f.rule: f.count for f in audit([str(path)], jobs=1).findings}


def test_a_log_whose_every_record_is_at_minus_1e18_is_not_clean_and_still_exports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def far_past(records: list[dict[str, Any]]) -> None:
        for n, rec in enumerate(records):
            rec["ts"] = -1e18 + n * 1e3

    path = edited(tmp_path, far_past)
    result = audit([str(path)], jobs=1)
    [finding] = [f for f in result.findings if f.rule == "LA022"]
    assert result.exit_code == 1 and "has ts -1e+18, not between 2000 and 2100" in finding.message
    assert main(["export", str(path), "-o", str(tmp_path / "t.json.gz")]) == 0
    assert orjson.loads(gzip.decompress((tmp_path / "t.json.gz").read_bytes()))["traceEvents"]
    assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 0
    capsys.readouterr()


def test_one_record_after_2100_among_good_ones_exports_to_chrome_otlp_and_report(tmp_path: Path) -> None:
    def far_future(records: list[dict[str, Any]]) -> None:
        records[index(clean_events(), "transition_completed", trigger="build_model")]["ts"] = 1e18

    path = edited(tmp_path, far_future)
    assert "LA022" in rules_of(path)
    assert main(["export", str(path), "-o", str(tmp_path / "t.json")]) == 0
    events = orjson.loads((tmp_path / "t.json").read_bytes())["traceEvents"]
    assert all(-(1 << 63) < e.get("ts", 0) < 1 << 63 and e.get("dur", 0) < 1 << 63 for e in events)
    assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 0
    pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")
    assert main(["export", "--format", "otlp-json", str(path), "-o", str(tmp_path / "t.otlp.json")]) == 0
    spans = orjson.loads((tmp_path / "t.otlp.json").read_bytes())["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert all(0 <= int(s["startTimeUnixNano"]) <= int(s["endTimeUnixNano"]) < 1 << 64 for s in spans)


def test_records_before_2000_are_each_counted_inside_a_run_the_batch_reader_would_take_whole(tmp_path: Path) -> None:
    def unset_clock(records: list[dict[str, Any]]) -> None:
        for n in (5, 6, 7):  # each later than the one before: only the first breaks the clock's order
            records[n]["ts"] = 500.0 + n

    path = edited(tmp_path, unset_clock)
    assert rules_of(path) == {"LA017": 1, "LA022": 3}


@pytest.mark.parametrize(("back_s", "found"), [(30.0, {"LA017": 1}), (120.0, {"LA017": 1, "LA022": 1})])
def test_a_step_back_of_more_than_a_minute_is_impossible_and_a_smaller_one_a_clock_step(
    tmp_path: Path, back_s: float, found: dict[str, int]
) -> None:
    def step_back(records: list[dict[str, Any]]) -> None:
        at = index(clean_events(), "transition_completed", trigger="build_model")
        for rec in records[at:]:
            rec["ts"] = float(rec["ts"]) - back_s

    assert rules_of(edited(tmp_path, step_back)) == found
