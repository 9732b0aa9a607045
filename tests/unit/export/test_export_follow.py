"""`lifecycle export --follow`: spans written while the ranks run, one OTLP JSON request per line."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import orjson
import pytest

from lifecycle.testing import ROOT, follow
from tests.otlp_spans import flat_spans

pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")


def spans_of(path: Path) -> list[dict[str, object]]:
    out = []
    for line in path.read_bytes().splitlines():
        for resource in orjson.loads(line)["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                out += scope["spans"]
    return out


def test_spans_are_written_as_the_ranks_go_and_each_rank_ends_its_root(tmp_path: Path) -> None:
    from export_logs import engine_rank, train_and_shut_down

    logs, out = tmp_path / "logs", tmp_path / "live.jsonl"
    logs.mkdir()
    before_rank_1: list[int] = []

    def run() -> None:
        train_and_shut_down(engine_rank(logs, 0, 2))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(s["name"] == ROOT for s in _spans(out)):
            time.sleep(0.01)
        before_rank_1.append(len(_spans(out)))
        train_and_shut_down(engine_rank(logs, 1, 2))

    worker = threading.Thread(target=run)
    worker.start()
    written = follow(logs, out, poll_s=0.02, idle_timeout_s=30, stop=lambda: not worker.is_alive())
    worker.join()
    spans = spans_of(out)
    assert written == len(spans)
    assert before_rank_1[0] >= 7  # rank 0's root and states were out before rank 1 started
    roots = [s for s in spans if s["name"] == ROOT]
    assert len(roots) == 2 and all("parentSpanId" not in s for s in roots)
    states = [s["name"] for s in spans if s["name"] != ROOT]
    assert states.count("VALIDATED") == 2 and states.count("CALLBACKS_BOUND") == 2 and states.count("SHUT_DOWN") == 2
    assert all(s.get("status", {}).get("code") is None for s in spans)  # a clean run: no error


def _spans(path: Path) -> list[dict[str, object]]:
    return spans_of(path) if path.exists() else []


def test_a_failed_rank_ends_with_error_status(tmp_path: Path) -> None:
    from export_logs import failed_run

    failed_run(tmp_path / "logs")
    out = tmp_path / "live.jsonl"
    follow(tmp_path / "logs", out, poll_s=0.01, idle_timeout_s=0.2)
    roots = {  # the rank is its process's, on the resource (nemo-lens's `dl.rank`)
        s["resource"]["dl.rank"]["intValue"]: s
        for s in flat_spans(out.read_bytes().splitlines()).values()
        if s["name"] == ROOT
    }
    assert sorted(roots) == ["0", "1", "2", "3"]
    assert all(r["status"]["code"] == 2 for r in roots.values())
    assert "CUDA out of memory" in roots["2"]["status"]["message"]
