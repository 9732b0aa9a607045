"""The HTML report: one self-contained file (no network, nothing a log holds becomes markup), the
data it shows, and rows that stay few at thousands of ranks. The browser test renders it
(tests/integration/test_export_browser.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from lifecycle.cli import main
from lifecycle.export import load
from lifecycle.testing import report_data, rows


def page_data(html: str) -> Any:
    blob = re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S)
    assert blob is not None
    return orjson.loads(blob.group(1))


def test_the_page_fetches_nothing(tmp_path: Path, failed_logs: Path) -> None:
    out = tmp_path / "report.html"
    assert main(["report", str(failed_logs), "-o", str(out)]) == 0
    html = out.read_text()
    assert not re.search(r"<(script|link|img|iframe)[^>]*\b(src|href)=", html)
    assert "default-src 'none'" in html and "http" not in html.replace("http-equiv", "")


def test_it_shows_the_root_cause_victims_violations_with_rule_links(tmp_path: Path, failed_logs: Path) -> None:
    out = tmp_path / "report.html"
    assert main(["report", str(failed_logs), "-o", str(out), "--rules-url", "https://example.org/rules/"]) == 0
    data = page_data(out.read_text())
    [cause] = data["causes"]
    assert cause["rank"] == 2 and "CUDA out of memory" in cause["message"]
    assert [v["rank"] for v in cause["victims"]] == [0, 1, 3]
    la012 = next(f for f in data["findings"] if f["rule"] == "LA012")
    assert la012["url"] == "https://example.org/rules/LA012.md" and la012["slug"] == "tripwire-violation"
    assert [r["shown"] for r in data["rows"]] == [0, 1, 2, 3] and not data["aggregated"]
    assert data["rows"][2]["failure"][1] == "failed" and data["rows"][2]["unfinished"][0] == "init_distributed"
    assert data["fingerprints"] == ["f" * 64]


def test_a_value_from_the_log_cannot_close_the_script(tmp_path: Path) -> None:
    from export_logs import clean_events, clock, write_events

    ev = clean_events()
    ev.insert(
        3, ("config_mutated", {"field": "x", "validated": "</script><script>alert(1)</script>", "current": "<b>"})
    )
    with clock(100.0 + i for i in range(len(ev))):
        write_events(tmp_path, ev, run_id="</script>")
    out = tmp_path / "r.html"
    assert main(["report", str(tmp_path), "-o", str(out)]) == 0
    html = out.read_text()
    assert html.count("</script>") == 2 and "alert(1)" in html  # the template's own two, the value escaped
    assert page_data(html)["run_ids"] == ["</script>"]


def test_restart_cycles_say_what_changed(tmp_path: Path) -> None:
    from export_logs import clean_events, clock, write_events

    first = clean_events()
    with clock(100.0 + i for i in range(len(first))):
        write_events(tmp_path, first, run_id="r")
    second = clean_events(fp="e" * 64)  # the same run id again: the file is continued, as after a torchrun restart
    for event, fields in second:
        if event == "lifecycle_started":
            fields["attempt"] = 1
        if event == "config_validated":
            fields["config"] = {**fields.get("config", {}), "training": {"seed": 7}}
    with clock(200.0 + i for i in range(len(second))):
        write_events(tmp_path, second, run_id="r")
    trace = load([str(tmp_path)])
    assert [c.attempt for c in trace.cycles] == [0, 1]
    assert trace.cycles[1].start - trace.t0 == 100.0
    changes = trace.cycles[1].changes
    assert any(c.startswith("config fingerprint: ffffffffffff -> eeeeeeeeeeee") for c in changes)
    assert any(c.startswith("training.seed:") and c.endswith("-> 7") for c in changes)
    data = report_data(trace)
    assert {b[3] for b in data["rows"][0]["bars"]} == {0, 1}


def test_thousands_of_ranks_fold_into_few_rows_with_the_outliers_apart(tmp_path: Path) -> None:
    from benchmarks.audit import fault_ranks, write_run

    write_run(tmp_path, 512, steps=1)
    trace = load([str(tmp_path)])
    found = rows(trace)
    assert len(found) <= 48 + 32
    assert sorted(r for row in found for r in row.ranks) == list(range(512))
    outliers = {row.ranks[0]: row.outlier for row in found if row.outlier}
    faults = fault_ranks(512)
    died = next(r for r, f in faults.items() if f == "died")
    slow = next(r for r, f in faults.items() if f == "straggler")
    assert outliers[died] == "startup died" and outliers[slow] == "straggler"
    wrong = next(r for r, f in faults.items() if f == "wrong_target")
    assert outliers[wrong] == "violation LA003"
