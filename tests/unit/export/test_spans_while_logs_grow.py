"""What the spans written while the logs grow promise (each test kills mutants of
`lifecycle/export/_follow.py` and `_live.py` that test_export_follow.py and test_export_live_unit.py
let through): `follow` by name, a rank file that starts mid-run, the detail of a failure's event, a
damaged line skipped; the live spans of a log whose first record is a finding; the spans file's mode."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.audit import ChainWriter
from lifecycle.testing import ROOT, LiveSpans, follow, live_spans

pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")

T = 1.7e9


def _started(w: ChainWriter) -> None:
    w.emit(T, "lifecycle_started", plan="training", target="CALLBACKS_BOUND", policy="raise", pid=7, host="node7")


def _validated(w: ChainWriter) -> None:
    w.emit(T + 0.25, "transition_started", trigger="validate", source="CONFIGURED")
    done = {"trigger": "validate", "source": "CONFIGURED", "dest": "VALIDATED", "duration_s": 0.25}
    w.emit(T + 0.5, "transition_completed", config_fingerprint=None, **done)


def _write(log_dir: Path, *writers: ChainWriter, damaged_after: int | None = None) -> Path:
    log_dir.mkdir(parents=True, exist_ok=True)
    for w in writers:
        lines = list(w.lines)
        if damaged_after is not None:
            lines.insert(damaged_after, b"{not json\n")
        (log_dir / f"rank-{w.base['rank']:05d}.jsonl").write_bytes(b"".join(lines))
    return log_dir


def _followed(log_dir: Path, out: Path) -> list[dict[str, Any]]:
    follow(log_dir=log_dir, output=out, idle_timeout_s=0.1, poll_s=0.01)
    return spans_in(out)


def test_follow_takes_the_log_directory_and_the_output_by_name(tmp_path: Path) -> None:
    w = ChainWriter("run-f", 0, 1)
    _started(w)
    _validated(w)
    names = [s["name"] for s in _followed(_write(tmp_path / "logs", w), tmp_path / "out.jsonl")]
    assert sorted(names) == sorted([ROOT, "VALIDATED"])


def test_a_rank_file_that_starts_mid_run_still_gets_its_root_span(tmp_path: Path) -> None:
    """A file continued from an earlier one (its `lifecycle_started` is there): the root opens at
    its first record, the state's span is its child."""
    w = ChainWriter("run-f", 0, 1)
    _validated(w)
    spans = {s["name"]: s for s in _followed(_write(tmp_path / "logs", w), tmp_path / "out.jsonl")}
    assert sorted(spans) == sorted([ROOT, "VALIDATED"])
    assert spans["VALIDATED"]["parentSpanId"] == spans[ROOT]["spanId"]


def test_a_failure_event_on_the_root_says_the_error_or_the_signal(tmp_path: Path) -> None:
    peer, signalled = ChainWriter("run-f", 0, 2), ChainWriter("run-f", 1, 2)
    for w in (peer, signalled):
        _started(w)
        _validated(w)
    peer.emit(T + 1, "peer_failed", peer_rank=1, peer_state="VALIDATED", error="RuntimeError: gone")
    signalled.emit(T + 1, "signal_received", signal="SIGTERM", state="VALIDATED")
    spans = _followed(_write(tmp_path / "logs", peer, signalled), tmp_path / "out.jsonl")
    details = {
        e["name"]: next(a["value"]["stringValue"] for a in e["attributes"] if a["key"] == "lifecycle.detail")
        for s in spans
        if s["name"] == ROOT
        for e in s.get("events", [])
    }
    assert details == {"peer_failed": "RuntimeError: gone", "signal_received": "SIGTERM"}
    statuses = sorted(s["status"]["message"] for s in spans if s["name"] == ROOT)
    assert statuses == ["peer_failed: RuntimeError: gone", "signal_received: SIGTERM"]


def test_a_timed_out_rank_ends_its_root_naming_the_state_it_waited_in(tmp_path: Path) -> None:
    w = ChainWriter("run-f", 0, 2)
    _started(w)
    _validated(w)
    w.emit(T + 1, "state_timeout", state="VALIDATED", trigger="start_services", timeout_s=600, missing=[1])
    (root,) = [s for s in _followed(_write(tmp_path / "logs", w), tmp_path / "out.jsonl") if s["name"] == ROOT]
    assert root["status"]["message"] == "state_timeout: VALIDATED"


def test_a_damaged_line_is_skipped_and_the_records_after_it_still_make_spans(tmp_path: Path) -> None:
    w = ChainWriter("run-f", 0, 1)
    _started(w)
    _validated(w)
    names = [s["name"] for s in _followed(_write(tmp_path / "logs", w, damaged_after=1), tmp_path / "out.jsonl")]
    assert sorted(names) == sorted([ROOT, "VALIDATED"])


def test_a_first_record_that_breaks_the_chain_is_an_event_of_the_live_root(tmp_path: Path) -> None:
    """The live spans of a log whose very first record was altered after it was written: the
    audit's finding on line 1 is on the root span, as the export afterwards puts it."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    w = ChainWriter("run-f", 0, 1)
    _started(w)
    _validated(w)
    w.lines[0] = w.lines[0].replace(b'"host":"node7"', b'"host":"node8"')
    exporter = InMemorySpanExporter()
    live = LiveSpans(SimpleSpanProcessor(exporter))
    for line in w.lines:
        live(line)
    live.close()
    (root,) = [s for s in exporter.get_finished_spans() if s.name == ROOT]
    found = {e.name: dict(e.attributes or {}) for e in root.events}
    assert sorted(found) == ["LA009", "LA010"]  # the record changed; the log stops before the target
    assert found["LA009"]["lifecycle.kind"] == "finding" and "seq 0" in str(found["LA009"]["lifecycle.detail"])


def test_the_live_spans_file_is_made_readable_by_all_and_writable_by_its_owner(tmp_path: Path) -> None:
    target = tmp_path / "spans.jsonl"
    umask = os.umask(0o022)
    try:
        live_spans(str(target)).close()
    finally:
        os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o644


def test_records_stamped_in_whole_seconds_are_followed_at_their_time(tmp_path: Path) -> None:
    w = ChainWriter("run-f", 0, 1)
    w.emit(int(T), "lifecycle_started", plan="training", target="CALLBACKS_BOUND", policy="raise", pid=7, host="n")
    w.emit(int(T) + 1, "transition_started", trigger="validate", source="CONFIGURED")
    done = {"trigger": "validate", "source": "CONFIGURED", "dest": "VALIDATED", "duration_s": 1}
    w.emit(int(T) + 2, "transition_completed", config_fingerprint=None, **done)
    spans = {s["name"]: s for s in _followed(_write(tmp_path / "logs", w), tmp_path / "out.jsonl")}
    assert spans["VALIDATED"]["startTimeUnixNano"] == str((int(T) + 1) * 10**9)
    assert spans["VALIDATED"]["endTimeUnixNano"] == str((int(T) + 2) * 10**9)
    assert spans[ROOT]["startTimeUnixNano"] == str(int(T) * 10**9)


def test_an_endpoints_own_log_lines_never_show_its_password_and_it_is_waited_for_5_s_at_most(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The OTLP exporter logs the endpoint when an export fails: those lines go through the
    redaction (here a stand-in for opentelemetry-exporter-otlp, which logs as the real one does)."""
    import logging
    import types

    from opentelemetry.sdk.trace import export

    name = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
    logger = logging.getLogger(name)
    waits: list[float] = []

    class BoundedBatch(export.BatchSpanProcessor):
        def __init__(self, exporter: Any, **kw: Any) -> None:
            waits.append(kw["export_timeout_millis"] / 1000)
            super().__init__(exporter, **kw)

    class OTLPSpanExporter:
        def __init__(self, endpoint: str, timeout: float) -> None:
            self.endpoint = endpoint
            waits.append(timeout)

        def export(self, spans: object) -> None:
            logger.warning("Failed to export batch to %s", self.endpoint)

        def shutdown(self) -> None:
            pass

        def force_flush(self, timeout_millis: int = 0) -> bool:
            return True

    module = types.ModuleType(name)
    module.OTLPSpanExporter = OTLPSpanExporter  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(logger, "filters", [])
    monkeypatch.setattr(export, "BatchSpanProcessor", BoundedBatch)
    url = "http://user:pw-SECRET-3@127.0.0.1:9/v1/traces"
    sink = live_spans(url)
    sink.close()
    with caplog.at_level(logging.WARNING, logger=name):
        OTLPSpanExporter(url, 5).export([])
    assert caplog.records and "Failed to export" in caplog.text and "SECRET-3" not in caplog.text
    assert waits[:2] == [5, 5]  # an endpoint that does not answer holds each request and each batch 5 s at most


def _live(lines: list[bytes]) -> dict[str, Any]:
    """The spans LiveSpans makes of these lines, by name (each name once)."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    live = LiveSpans(SimpleSpanProcessor(exporter))
    for line in lines:
        live(line)
    live.close()
    return {s.name: s for s in exporter.get_finished_spans()}


def _events(span: Any) -> list[str]:
    return sorted(e.name for e in span.events)


def _two_states(w: ChainWriter) -> None:
    _started(w)
    _validated(w)
    w.emit(T + 0.75, "transition_started", trigger="start_services", source="VALIDATED")
    done = {"trigger": "start_services", "source": "VALIDATED", "dest": "SERVICES_READY", "duration_s": 0.25}
    w.emit(T + 1.0, "transition_completed", **done)


def test_a_live_log_continued_from_an_earlier_file_gets_its_root_and_no_chain_finding() -> None:
    w = ChainWriter("run-f", 0, 1)
    _two_states(w)
    whole, continued = _live(w.lines), _live(w.lines[3:])
    assert sorted(continued) == sorted([ROOT, "SERVICES_READY"])
    found = {name: _events(span) for name, span in continued.items()}
    assert found == {ROOT: ["LA010"], "SERVICES_READY": []}  # only: the log stops before the target
    assert _events(whole[ROOT]) == ["LA010"]


def test_a_record_missing_from_the_middle_of_a_live_log_is_a_finding() -> None:
    w = ChainWriter("run-f", 0, 1)
    _two_states(w)
    spans = _live(w.lines[:2] + w.lines[3:])
    found = [e for s in spans.values() for e in s.events if e.name != "LA010"]
    assert found and all(e.attributes and e.attributes["lifecycle.kind"] == "finding" for e in found)


def test_the_live_root_lasts_until_a_failure_logged_after_the_last_state(tmp_path: Path) -> None:
    w = ChainWriter("run-f", 0, 2)
    _started(w)
    _validated(w)
    w.emit(T + 7.0, "peer_failed", peer_rank=1, peer_state="SERVICES_READY", error="RuntimeError: gone")
    root = _live(w.lines)[ROOT]
    assert root.end_time == int(T + 7.0) * 10**9
    assert "peer_failed" in _events(root)  # the failure's own record, as an event at its time


def test_a_transition_running_when_its_rank_fails_is_followed_to_the_failure_in_error(tmp_path: Path) -> None:
    w = ChainWriter("run-f", 0, 1)
    _started(w)
    _validated(w)
    w.emit(T + 1.0, "transition_started", trigger="start_services", source="VALIDATED")
    w.emit(T + 2.0, "peer_failed", peer_rank=1, peer_state="SERVICES_READY", error="RuntimeError: gone")
    spans = {s["name"]: s for s in _followed(_write(tmp_path / "logs", w), tmp_path / "out.jsonl")}
    running = spans["start_services (running)"]
    assert running["endTimeUnixNano"] == str(int(T + 2.0) * 10**9)
    assert running["status"]["code"] == 2 and "gone" in running["status"]["message"]


class _Clock:
    """time.monotonic for `follow`: each reading a quarter second later; `stop()` appends the next
    chunk of records to the rank file before each pass (the records are read in that pass)."""

    def __init__(self, path: Path, chunks: list[list[bytes]]) -> None:
        self.now, self.path, self.chunks, self.passes = 0.0, path, list(chunks), 0

    def monotonic(self) -> float:
        self.now += 0.25
        return self.now

    def stop(self) -> bool:
        self.passes += 1
        if self.chunks:
            with self.path.open("ab") as fh:
                fh.write(b"".join(self.chunks.pop(0)))
        return False


def _follow_fed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunks: list[list[bytes]], **kw: float) -> _Clock:
    (tmp_path / "logs").mkdir()
    clock = _Clock(tmp_path / "logs" / "rank-00000.jsonl", chunks)
    monkeypatch.setattr("time.monotonic", clock.monotonic)
    follow(tmp_path / "logs", tmp_path / "out.jsonl", stop=clock.stop, **kw)
    return clock


def _shut_down(w: ChainWriter) -> None:
    w.emit(T + 2.0, "transition_started", trigger="shutdown", source="SERVICES_READY")
    w.emit(
        T + 2.5, "transition_completed", trigger="shutdown", source="SERVICES_READY", dest="SHUT_DOWN", duration_s=0.5
    )


def test_following_waits_for_the_first_rank_file_and_goes_on_while_records_come(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing for two passes, then one record a pass for longer than the idle timeout: every span
    is written, and the following ends at the pass that reads the shutdown."""
    w = ChainWriter("run-f", 0, 1)
    _two_states(w)
    _shut_down(w)
    clock = _follow_fed(tmp_path, monkeypatch, [[], *([line] for line in w.lines)], idle_timeout_s=1.0, poll_s=0)
    names = [s["name"] for s in spans_in(tmp_path / "out.jsonl")]
    assert sorted(names) == sorted([ROOT, "VALIDATED", "SERVICES_READY", "SHUT_DOWN"])
    assert clock.passes == 1 + len(w.lines)


def test_following_a_log_that_stops_ends_after_sixty_quiet_seconds_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = ChainWriter("run-f", 0, 1)
    _two_states(w)
    clock = _follow_fed(tmp_path, monkeypatch, [w.lines], poll_s=0)
    assert 60.0 < clock.now - 0.5 <= 60.25  # the pass that read the records: at 0.5 s
    (root,) = [s for s in spans_in(tmp_path / "out.jsonl") if s["name"] == ROOT]
    assert root["status"]["message"] == "the log stops here"


def spans_in(path: Path) -> list[dict[str, Any]]:
    spans = []
    for line in path.read_bytes().splitlines():
        for resource in orjson.loads(line)["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                spans += scope["spans"]
    return spans


def test_the_live_root_is_written_at_the_shutdown_before_the_log_closes() -> None:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    w = ChainWriter("run-f", 0, 1)
    _two_states(w)
    _shut_down(w)
    exporter = InMemorySpanExporter()
    live = LiveSpans(SimpleSpanProcessor(exporter))
    for line in w.lines:
        live(line)
    names = [s.name for s in exporter.get_finished_spans()]  # the log not closed yet
    assert names[-2:] == ["SHUT_DOWN", ROOT]
    live.close()


def test_a_violation_at_the_very_start_or_end_of_a_state_is_an_event_of_its_live_span() -> None:
    w = ChainWriter("run-f", 0, 1)
    _started(w)
    w.emit(T + 0.25, "transition_started", trigger="validate", source="CONFIGURED")
    trip = {"target": "torch.manual_seed", "kind": "rng", "owner": "init_distributed", "policy": "warn"}
    w.emit(T + 0.25, "tripwire_violation", state="CONFIGURED", trigger="validate", **trip)
    w.emit(T + 0.5, "tripwire_violation", state="CONFIGURED", trigger="validate", **trip)
    done = {"trigger": "validate", "source": "CONFIGURED", "dest": "VALIDATED", "duration_s": 0.25}
    w.emit(T + 0.5, "transition_completed", config_fingerprint=None, **done)
    validated = _live(w.lines)["VALIDATED"]
    times = sorted(e.timestamp for e in validated.events if e.name == "tripwire_violation")
    assert times == [validated.start_time, validated.end_time]


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="no /proc/self/fd")
def test_the_live_spans_file_is_closed_once_with_the_log_whatever_the_restart_cycles(tmp_path: Path) -> None:
    """Two restart cycles (two providers, each shutting the file's exporter down): one descriptor
    opened, closed once, and nothing else of the process closed (stdin, stdout and stderr stay open)."""
    before = _fds()
    sink = live_spans(str(tmp_path / "spans.jsonl"))
    assert len(_fds() - before) == 1
    w = ChainWriter("run-f", 0, 1)
    _started(w)
    _validated(w)
    w.emit(T + 1, "lifecycle_started", plan="training", target="CALLBACKS_BOUND", policy="raise", attempt=1, pid=8)
    for line in w.lines:
        sink(line)
    sink.close()
    assert _fds() <= before and {"0", "1", "2"} <= _fds()
    os.fstat(0)


def test_an_endpoint_without_the_otlp_exporter_installed_is_refused_naming_the_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lifecycle.errors import ExtraNotInstalled

    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    with pytest.raises(ExtraNotInstalled, match="pip install opentelemetry-exporter-otlp"):
        live_spans("https://collector:4318/v1/traces")


def test_following_pauses_between_passes_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass that finds the ranks not done yet waits (0.2 s by default) before the next one."""
    w = ChainWriter("run-f", 0, 1)
    _two_states(w)
    _shut_down(w)
    clock = _follow_fed(tmp_path, monkeypatch, [[], w.lines])
    assert clock.passes == 2
