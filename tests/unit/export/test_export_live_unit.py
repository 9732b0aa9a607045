"""`logging.otel`: the running lifecycle writes its spans as it goes, the same spans `lifecycle export
--format otlp-json` makes afterwards from its logs; a file it cannot write costs one `warning`
record, never the run; the field is a path as typed, a URL only as an http(s) endpoint."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from lifecycle import InProcessPhases, Lifecycle, RunConfig
from lifecycle.config import Environment, validate
from lifecycle.export import load
from lifecycle.log import records
from lifecycle.testing import ROOT, write_otlp
from states import STARTUP_ORDER, State
from tests.otlp_spans import flat_spans

pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")


def rank(log_dir: Path, otel: str, rank_: int = 0, world: int = 1, phases: Any = None) -> Lifecycle:
    config = RunConfig.from_dict({"logging": {"otel": otel}})
    saved = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE")}
    os.environ.update(RANK=str(rank_), WORLD_SIZE=str(world))
    try:
        return Lifecycle(config, log_dir=log_dir, phases=phases or InProcessPhases(), tripwires="off", run_id="live-a")
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)


def names(path: Path) -> list[str]:
    return [s["name"] for s in flat_spans(path.read_bytes().splitlines()).values()] if path.exists() else []


def test_spans_are_written_as_the_run_goes_and_equal_the_export_of_its_logs(tmp_path: Path) -> None:
    logs, live = tmp_path / "logs", tmp_path / "live.jsonl"
    seen = {}
    for r in range(2):
        lc = rank(logs, str(live), r, 2)
        lc.validate()
        seen[f"{r} validated"] = names(live)
        lc.advance_to(State.CALLBACKS_BOUND)
        lc.record(records.StepCompleted(step=1, loss=0.5, duration_s=0.01))
        seen[f"{r} bound"] = names(live)
        lc.shutdown()
    assert seen["0 validated"] == ["VALIDATED"]  # written at its transition_completed, the root still open
    assert ROOT not in seen["0 bound"] and seen["0 bound"][-1] == "CALLBACKS_BOUND"
    assert seen["1 validated"].count(ROOT) == 1  # rank 0's root: written at its shutdown
    write_otlp(load([str(logs)]), tmp_path / "after.json")
    after = flat_spans([(tmp_path / "after.json").read_bytes()])
    written = flat_spans(live.read_bytes().splitlines())
    # per rank: its root, one span per forward transition (each startup state but CONFIGURED), the shutdown's
    per_rank = [ROOT, *(s.name for s in STARTUP_ORDER[1:]), State.SHUT_DOWN.name]
    expected, got = Counter(per_rank * 2), Counter(s["name"] for s in written.values())
    assert got == expected, (
        f"spans missing: {sorted((expected - got).elements())}, extra: {sorted((got - expected).elements())}"
    )
    assert written == after
    roots = [s for s in written.values() if s["name"] == ROOT]
    assert {r["attributes"]["lifecycle.steps"]["intValue"] for r in roots} == {"1"}


def test_a_failed_transition_ends_its_span_and_the_root_with_status_error(tmp_path: Path) -> None:
    def broken(ctx: Any, enter: Any) -> Any:
        raise RuntimeError("the rendezvous broke")

    logs, live = tmp_path / "logs", tmp_path / "live.jsonl"
    lc = rank(logs, str(live), phases=InProcessPhases().around(State.DISTRIBUTED, enter=broken))
    with pytest.raises(Exception, match="rendezvous"):
        lc.advance_to(State.CALLBACKS_BOUND)
    lc.shutdown()
    written = flat_spans(live.read_bytes().splitlines())
    write_otlp(load([str(logs)]), tmp_path / "after.json")
    assert written == flat_spans([(tmp_path / "after.json").read_bytes()])
    root = next(s for s in written.values() if s["name"] == ROOT)
    assert root["status"]["code"] == 2 and "rendezvous" in root["status"]["message"]


def _warnings(logs: Path) -> list[dict[str, Any]]:
    records = [orjson.loads(line) for line in (logs / "rank-00000.jsonl").read_bytes().splitlines()]
    assert records[-1]["event"] == "transition_completed" and records[-1]["dest"] == "SHUT_DOWN"
    return [r for r in records if r["event"] == "warning"]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full to fill")
def test_a_file_that_fills_up_is_one_warning_and_the_run_goes_on(tmp_path: Path) -> None:
    lc = rank(tmp_path / "logs", "/dev/full")
    lc.advance_to(State.CALLBACKS_BOUND)
    lc.shutdown()
    (warning,) = _warnings(tmp_path / "logs")
    assert warning["category"] == "LogSinkFailed" and "No space left" in warning["message"]


def test_a_file_of_something_else_or_a_link_is_left_untouched_with_one_warning(tmp_path: Path) -> None:
    precious = tmp_path / "notes.txt"
    precious.write_text("not spans\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(precious)
    for n, target in enumerate((precious, link, tmp_path / "absent" / "spans.jsonl")):
        logs = tmp_path / f"logs{n}"
        lc = rank(logs, str(target))
        lc.advance_to(State.CALLBACKS_BOUND)
        lc.shutdown()
        (warning,) = _warnings(logs)
        assert warning["category"] == "OtelExportFailed" and str(target) in warning["message"]
    assert precious.read_text() == "not spans\n"


def test_an_endpoint_password_is_never_written(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    lc = rank(tmp_path / "logs", "http://user:pw-SECRET-1@127.0.0.1:9/v1/traces?token=SECRET-1")
    lc.advance_to(State.CALLBACKS_BOUND)
    lc.shutdown()
    out, err = capfd.readouterr()
    assert "SECRET-1" not in (tmp_path / "logs" / "rank-00000.jsonl").read_text() + out + err


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("s3://bucket/spans?token=SECRET-2", "is a URL but not an http(s) OTLP endpoint"),
        ("spans\n.jsonl", "a line break"),
        ("", "is empty"),
    ],
)
def test_a_url_other_than_an_endpoint_is_refused_naming_the_field(value: str, problem: str) -> None:
    (found,) = [p for p in validate(RunConfig.from_dict({"logging": {"otel": value}}), environment=False)]
    assert found.field == "logging.otel" and problem in found.message and "SECRET-2" not in str(found)


def test_an_endpoint_needs_the_exporter_and_a_file_the_sdk() -> None:
    def fields(otel: str, modules: set[str]) -> list[str]:
        config = RunConfig.from_dict({"logging": {"otel": otel}})
        return [p.field for p in validate(config, Environment(modules=frozenset(modules)))]

    endpoint, sdk, http = "https://host:4318/v1/traces", "opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"
    assert fields(endpoint, {sdk}) == ["logging.otel"] and fields(endpoint, {sdk, http}) == []
    assert fields("spans.jsonl", set()) == ["logging.otel"] and fields("spans.jsonl", {sdk}) == []


@pytest.mark.parametrize("path", ["runs/x #1.jsonl", "yes", "1e3", "{x}"])
def test_the_field_set_with_set_is_the_path_as_typed(path: str) -> None:
    assert RunConfig.from_dict({}, [f"logging.otel={path}"]).logging.otel == path


def test_an_endpoint_receives_the_spans_over_otlp_http(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="opentelemetry-exporter-otlp is not installed")
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    received: list[str] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # http.server's name
            request = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers["Content-Length"])))
            received.extend(s.name for r in request.resource_spans for ss in r.scope_spans for s in ss.spans)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        lc = rank(tmp_path / "logs", f"http://127.0.0.1:{server.server_port}/v1/traces")
        lc.advance_to(State.CALLBACKS_BOUND)
        lc.shutdown()  # the log's close flushes the batch
    finally:
        server.shutdown()
    assert sorted(received) == sorted(
        ["VALIDATED", "SERVICES_READY", "DISTRIBUTED", "MODEL_BUILT", "CALLBACKS_BOUND", "SHUT_DOWN", ROOT]
    )
