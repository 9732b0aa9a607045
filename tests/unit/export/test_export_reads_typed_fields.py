"""The export reads each record's fields as the log's schema types them: a record whose
field has another type is refused in one line naming its file, line, event and field, as the audit
refuses one, by the second read of a file (`read_details`), by `export --follow` and by the live
spans; never a traceback, never a value drawn as if it were of its type."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.audit import ChainWriter
from lifecycle.cli import main
from lifecycle.errors import LogUnreadable
from lifecycle.export import load
from lifecycle.testing import read_details

T = 1.7e9


def _started(w: ChainWriter, **fields: object) -> None:
    w.emit(T, "lifecycle_started", plan="training", target="CALLBACKS_BOUND", policy="raise", **fields)


def _validated(w: ChainWriter) -> None:
    w.emit(T + 0.25, "transition_started", trigger="validate", source="CONFIGURED")
    done = {"trigger": "validate", "source": "CONFIGURED", "dest": "VALIDATED", "duration_s": 0.25}
    w.emit(T + 0.5, "transition_completed", config_fingerprint=None, **done)


def _write(log_dir: Path, w: ChainWriter) -> Path:
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / f"rank-{w.base['rank']:05d}.jsonl"
    path.write_bytes(b"".join(w.lines))
    return path


@pytest.mark.parametrize(
    ("event", "fields", "refused"),
    [
        ("lifecycle_started", {"pid": "7"}, "field 'pid' is '7', expected int"),
        ("guard_rejected", {"guard": 5, "trigger": "start_services"}, "field 'guard' is 5, expected str"),
        ("distributed_initialized", {"ranks": {"tp": "0"}}, "field 'ranks' is {'tp': '0'}, expected dict[str, int]"),
    ],
)
def test_a_field_only_the_export_reads_of_another_type_is_refused_naming_its_line_event_and_field(
    tmp_path: Path, event: str, fields: dict[str, object], refused: str
) -> None:
    """Fields the audit does not read (a process id, a guard's name, a rank's coordinates): the audit
    passes the log, the export does not draw it."""
    w = ChainWriter("run-t", 0, 1)
    _started(w, host="node0")
    _validated(w)
    w.emit(T + 1, event, **fields)
    path = _write(tmp_path / "logs", w)
    line = f"{path}:4: {event}: {refused}"
    with pytest.raises(LogUnreadable, match=re.escape(line)):
        read_details(str(path))
    with pytest.raises(LogUnreadable, match=re.escape(line)):
        load([str(path)])


def test_the_report_of_a_log_with_a_field_of_another_type_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = ChainWriter("run-t", 0, 1)
    _started(w, host="node0", restart_count="1")
    _validated(w)
    path = _write(tmp_path / "logs", w)
    assert main(["report", str(tmp_path / "logs"), "-o", str(tmp_path / "report.html")]) == 2
    expected = f"lifecycle report: {path}:1: lifecycle_started: field 'restart_count' is '1', expected int."
    assert capsys.readouterr().err.splitlines() == [expected]
    assert not (tmp_path / "report.html").exists()


def _spans(path: Path) -> dict[str, dict[str, Any]]:
    spans = {}
    for line in path.read_bytes().splitlines():
        for resource in orjson.loads(line)["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                spans |= {s["name"]: s for s in scope["spans"]}
    return spans


def test_following_a_record_whose_field_is_of_another_type_ends_naming_its_line_event_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The spans before it are written, the rank's root ends with the refusal as its error; the CLI
    says it in one line and exits 2."""
    pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")
    from lifecycle.testing import ROOT, follow

    w = ChainWriter("run-f", 0, 1)
    _started(w)
    _validated(w)
    w.emit(T + 0.75, "transition_started", trigger=7, source="VALIDATED")
    path = _write(tmp_path / "logs", w)
    refused = f"{path}:4: transition_started: field 'trigger' is 7, expected str"
    out = tmp_path / "out.jsonl"
    with pytest.raises(LogUnreadable, match=re.escape(refused)):
        follow(log_dir=tmp_path / "logs", output=out, idle_timeout_s=0.1, poll_s=0.01)
    spans = _spans(out)
    assert sorted(spans) == sorted([ROOT, "VALIDATED"])
    assert spans[ROOT]["status"]["message"] == refused
    cli = ["export", "--follow", str(tmp_path / "logs"), "--format", "otlp-json", "--idle-timeout", "0.1"]
    assert main([*cli, "-o", str(tmp_path / "again.jsonl")]) == 2
    assert capsys.readouterr().err.splitlines() == [f"lifecycle export: {refused}."]


def test_a_live_record_whose_field_is_of_another_type_is_refused_naming_its_line_event_and_field() -> None:
    """The log drops a sink that raises and says why in one `warning` record (docs/observability.md)."""
    pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from lifecycle.testing import LiveSpans

    w = ChainWriter("run-l", 0, 1)
    _started(w, host="node0")
    w.emit(T + 0.5, "side_effect_refused", kind="rng", owner="x", reason=["no"], state="VALIDATED", trigger="t")
    live = LiveSpans(SimpleSpanProcessor(InMemorySpanExporter()))
    live(w.lines[0])
    expected = "live:2: side_effect_refused: field 'reason' is ['no'], expected str"
    with pytest.raises(LogUnreadable, match=re.escape(expected)):
        live(w.lines[1])


def test_a_record_of_each_event_is_read_without_a_field_its_reader_did_not_declare(tmp_path: Path) -> None:
    """Each reader gets a struct of the fields it declares (`EXPORT_READS`, `FOLLOWS`) and reading
    any other raises AttributeError: one bare record of every event, through every branch of the
    details and of `--follow`, finds a field read but not declared before a log does."""
    pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")
    from lifecycle.log.schema import SCHEMA
    from lifecycle.testing import ROOT, follow

    lines = [orjson.dumps({"event": event, "rank": 0, "ts": T + i}) + b"\n" for i, event in enumerate(SCHEMA)]
    (tmp_path / "logs").mkdir()
    path = tmp_path / "logs" / "rank-00000.jsonl"
    path.write_bytes(b"".join(lines))
    (details,) = read_details(str(path), range(1, len(lines) + 1)).values()
    assert len(details.marks) == 12 and len(details.line_ts) == len(SCHEMA)
    follow(log_dir=tmp_path / "logs", output=tmp_path / "out.jsonl", idle_timeout_s=0.1, poll_s=0.01)
    assert ROOT in _spans(tmp_path / "out.jsonl")
