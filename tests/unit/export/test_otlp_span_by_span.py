"""What the OpenTelemetry spans promise, checked span by span (each test kills mutants of
`lifecycle/export/_otlp.py`, `_sdk.py` and `_encode.py` that test_export_otlp.py let through): Unix
nanosecond times, the run on the resource and the process on the root, a violation on the span it
happened in, a root that lasts until the failure, and the OTLP JSON of every attribute type."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.audit import ChainWriter
from lifecycle.export import load
from lifecycle.testing import ROOT, encode, spans

pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")

T = 1.7e9  # the run's first record; every offset below is a multiple of 1/4 s, exact in a float
FP = "f" * 64
NS = 1_000_000_000


def _write(log_dir: Path, w: ChainWriter) -> Path:
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / f"rank-{w.base['rank']:05d}.jsonl").write_bytes(b"".join(w.lines))
    return log_dir


def _validated(w: ChainWriter, *, tripped_at_start: bool = False) -> None:
    """VALIDATED's work from +0 to +0.25 s, a violation logged at its very end (and at its start)."""
    w.emit(T, "transition_started", trigger="validate", source="CONFIGURED")
    trip = {"target": "torch.manual_seed", "kind": "rng", "owner": "init_distributed", "policy": "warn"}
    if tripped_at_start:
        w.emit(T, "tripwire_violation", state="CONFIGURED", trigger="validate", **trip)
    w.emit(T + 0.25, "config_validated", fingerprint=FP, config={}, environment=True)
    w.emit(T + 0.25, "tripwire_violation", state="CONFIGURED", trigger="validate", **trip)
    done = {"trigger": "validate", "source": "CONFIGURED", "dest": "VALIDATED", "duration_s": 0.25}
    w.emit(T + 0.25, "transition_completed", config_fingerprint=None, **done)


def _by_name(log_dir: Path) -> dict[str, Any]:
    return {s.name: s for s in spans(load([str(log_dir)]))}


def test_spans_are_in_unix_nanoseconds_and_say_the_run_the_process_and_where_a_violation_was(tmp_path: Path) -> None:
    """Rank 0 validates (a violation at the end of it), then waits in VALIDATED until a peer's
    failure stops it at +7 s: its root span lasts until then, with status ERROR."""
    w = ChainWriter("run-o", 0, 2)
    w.emit(T, "lifecycle_started", plan="training", target="CALLBACKS_BOUND", policy="raise", pid=7, host="node7")
    _validated(w, tripped_at_start=True)
    w.emit(T + 7.0, "peer_failed", peer_rank=1, peer_state="SERVICES_READY", error="RuntimeError: gone")
    found = _by_name(_write(tmp_path / "logs", w))
    root, validated = found[ROOT], found["VALIDATED"]
    assert abs(root.start_time - int(T) * NS) < 1000 and abs(root.end_time - (int(T) + 7) * NS) < 1000
    assert abs(validated.end_time - validated.start_time - NS // 4) < 1000
    assert root.status.status_code.name == "ERROR" and "gone" in (root.status.description or "")
    assert {k: root.attributes[k] for k in ("host.name", "process.pid")} == {"host.name": "node7", "process.pid": 7}
    resource = root.resource.attributes  # the rank's process, named as nemo-lens names it
    assert {k: resource[k] for k in ("nemo.run.id", "dl.rank", "dl.world_size", "service.instance.id")} == {
        "nemo.run.id": "run-o",
        "dl.rank": 0,
        "dl.world_size": 2,
        "service.instance.id": "run-o-rank0",
    }
    events = sorted(e.name for e in validated.events)  # the records at its start and end, the first's finding
    assert events == ["LA012", "tripwire_violation", "tripwire_violation"]
    [failed] = [e for e in root.events if e.name == "peer_failed"]  # logged after the last state's work
    assert abs(failed.timestamp - (int(T) + 7) * NS) < 1000 and failed.attributes["lifecycle.peer_rank"] == 1
    assert all(s.context.is_valid for s in found.values())  # W3C ids: 128-bit trace, 64-bit span, not 0


def test_a_log_without_its_lifecycle_started_gives_its_states_as_spans_of_cycle_0(tmp_path: Path) -> None:
    """A log whose first records were lost (no `lifecycle_started`): its states are still the
    root's children, in restart cycle 0, with the world size as logged."""
    w = ChainWriter("run-n", 0, 1)
    _validated(w)
    found = _by_name(_write(tmp_path / "logs", w))
    root = found[ROOT]
    assert set(found) == {ROOT, "VALIDATED"} and found["VALIDATED"].parent.span_id == root.context.span_id
    assert (root.attributes["nvrx.cycle"], root.resource.attributes["dl.world_size"]) == (0, 1)
    assert "host.name" not in root.attributes


def test_times_past_what_otlp_holds_are_held_to_its_first_and_the_sdks_last_nanosecond(tmp_path: Path) -> None:
    """A start stamped far before 1970 and a failure far in the future (a clock never set, LA022):
    the root span starts at 0 (OTLP's times are unsigned) and ends at the latest time the SDK's
    signed 64-bit nanoseconds hold, and is written."""
    w = ChainWriter("run-f", 0, 1)
    w.emit(-1e300, "lifecycle_started", plan="training", target="CALLBACKS_BOUND", policy="raise", pid=7, host="h")
    _validated(w)
    w.emit(1e300, "peer_failed", peer_rank=1, peer_state="SERVICES_READY", error="RuntimeError: gone")
    root = _by_name(_write(tmp_path / "logs", w))[ROOT]
    assert (root.start_time, root.end_time) == (0, 2**63 - 1)
    [written] = orjson.loads(orjson.dumps(encode([root])))["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert (written["startTimeUnixNano"], written["endTimeUnixNano"]) == ("0", str(2**63 - 1))


def _protobuf_json(doc: Any) -> Any:
    """OTLP JSON's hex ids as protobuf's JSON mapping has them (base64)."""
    if isinstance(doc, dict):
        ids = ("traceId", "spanId", "parentSpanId")
        return {
            k: base64.b64encode(bytes.fromhex(v)).decode() if k in ids else _protobuf_json(v) for k, v in doc.items()
        }
    return [_protobuf_json(v) for v in doc] if isinstance(doc, list) else doc


def test_encode_writes_every_attribute_type_as_the_sdk_encoder_does() -> None:
    """`encode` of spans made by the SDK with attributes of every OTLP type (arrays too), events,
    a described status and schema URLs: what the SDK's own protobuf encoder builds."""
    json_format = pytest.importorskip("google.protobuf.json_format")
    service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
    encoder = pytest.importorskip("opentelemetry.exporter.otlp.proto.common.trace_encoder")
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import Status, StatusCode

    provider = TracerProvider(resource=Resource.create({"service.name": "s"}, schema_url="https://r"))
    kept = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(kept))
    tracer = provider.get_tracer("t", "1.2", schema_url="https://s")
    values = {"b": True, "i": 3, "f": 0.5, "s": "x", "strs": ["a", "b"], "ints": (1, 2), "bools": [False]}
    with tracer.start_as_current_span("outer", attributes=values) as outer:
        outer.add_event("e", attributes={"n": 1, "fs": [1.5]})
        with tracer.start_as_current_span("inner") as inner:
            inner.set_status(Status(StatusCode.ERROR, "broke"))
    collected = kept.get_finished_spans()
    message = service.ExportTraceServiceRequest()
    json_format.Parse(orjson.dumps(_protobuf_json(encode(collected))), message)
    assert message == encoder.encode_spans(collected)
    assert {"arrayValue": {"values": [{"stringValue": "a"}, {"stringValue": "b"}]}} in [
        a["value"] for a in encode(collected)["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["attributes"]
    ]


def test_only_the_restart_cycle_that_failed_ends_in_error_with_its_unfinished_transition(tmp_path: Path) -> None:
    """Cycle 0 validates (a violation in it) and is restarted; cycle 1 fails in init_distributed at
    +105 s. Cycle 1's trace alone has the ERROR status and the transition that never completed, from
    its start to the failure, with the failure's record on it."""
    from export_logs import clean_events, clock, write_events

    trip = {"target": "torch.manual_seed", "kind": "rng", "owner": "x", "state": "CONFIGURED", "policy": "warn"}
    first = [*clean_events()[:2], ("tripwire_violation", {**trip, "trigger": "validate"})]
    with clock(100.0 + i for i in range(len(first))):
        write_events(tmp_path, first, run_id="r")
    second = clean_events()
    second[0][1]["attempt"] = 1
    cut = next(i for i, (e, f) in enumerate(second) if e == "transition_started" and f["trigger"] == "init_distributed")
    error = {"trigger": "init_distributed", "source": "SERVICES_READY", "error_type": "E", "error": "it broke"}
    second = [*second[: cut + 1], ("transition_failed", {**error, "duration_s": 1.0})]
    with clock([*(200.0 + i / 4 for i in range(cut + 1)), 205.0]):
        write_events(tmp_path, second, run_id="r")
    found = spans(load([str(tmp_path)]))
    roots = {s.attributes["nvrx.cycle"]: s for s in found if s.name == ROOT}
    assert [roots[c].status.status_code.name for c in (0, 1)] == ["UNSET", "ERROR"]
    [stopped] = [s for s in found if s.name == "init_distributed (not completed)"]
    assert stopped.context.trace_id == roots[1].context.trace_id and stopped.status.status_code.name == "ERROR"
    assert (stopped.start_time, stopped.end_time) == (200 * NS + cut * NS // 4, 205 * NS)
    assert stopped.attributes["lifecycle.completed"] is False
    assert "transition_failed" in [e.name for e in stopped.events]  # after cycle 0's violation, outside it
