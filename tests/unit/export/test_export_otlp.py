"""The OTLP JSON is read back by the OpenTelemetry protobuf packages without loss: parsed with
`google.protobuf.json_format` into `ExportTraceServiceRequest`, it equals what the SDK's own
protobuf encoder makes of the same spans. And the spans say what the mapping promises."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import orjson
import pytest

from lifecycle.cli import main
from lifecycle.export import load
from lifecycle.testing import ROOT, spans

pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")
json_format = pytest.importorskip("google.protobuf.json_format")
trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
encoder = pytest.importorskip(
    "opentelemetry.exporter.otlp.proto.common.trace_encoder",
    reason="opentelemetry-exporter-otlp-proto-common (dev extra) is not installed",
)


def to_protobuf_json(doc: Any) -> Any:
    """OTLP JSON writes trace and span ids in hex, where protobuf's JSON mapping has base64: the one
    documented difference (opentelemetry-proto docs/specification.md, JSON encoding)."""
    if isinstance(doc, dict):
        return {
            k: (
                base64.b64encode(bytes.fromhex(v)).decode()
                if k in ("traceId", "spanId", "parentSpanId")
                else to_protobuf_json(v)
            )
            for k, v in doc.items()
        }
    if isinstance(doc, list):
        return [to_protobuf_json(v) for v in doc]
    return doc


def parsed(path: Path) -> Any:
    message = trace_service.ExportTraceServiceRequest()
    json_format.Parse(orjson.dumps(to_protobuf_json(orjson.loads(path.read_bytes()))), message)
    return message


@pytest.mark.parametrize("logs", ["clean_logs", "failed_logs"])
def test_the_file_parses_into_what_the_sdk_encoder_builds(
    tmp_path: Path, logs: str, request: pytest.FixtureRequest
) -> None:
    log_dir = request.getfixturevalue(logs)
    out = tmp_path / "spans.json"
    assert main(["export", str(log_dir), "--format", "otlp-json", "-o", str(out)]) == 0
    expected = encoder.encode_spans(spans(load([str(log_dir)])))
    assert parsed(out) == expected
    again = tmp_path / "again.json"
    assert main(["export", str(log_dir), "--format", "otlp-json", "-o", str(again)]) == 0
    assert again.read_bytes() == out.read_bytes()  # ids come from the logs: the same file every time


def _by_rank(message: Any) -> dict[int, list[Any]]:
    """Roots by their resource's rank (nemo-lens's `dl.rank`); every other span under -1."""
    out: dict[int, list[Any]] = {}
    for resource in message.resource_spans:
        rank = _attrs(resource.resource)["dl.rank"]
        for scope in resource.scope_spans:
            for span in scope.spans:
                out.setdefault(rank if span.name == ROOT else -1, []).append(span)
    return out


def _attrs(item: Any) -> dict[str, Any]:
    return {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in item.attributes}


def test_a_root_span_per_rank_with_megatron_names_and_run_attributes(clean_logs: Path) -> None:
    message = encoder.encode_spans(spans(load([str(clean_logs)])))
    roots = _by_rank(message)
    assert sorted(k for k in roots if k >= 0) == [0, 1]
    children = roots[-1]
    assert len({c.trace_id for c in children}) == 2
    megatron = {_attrs(c).get("megatron.span") for c in children}
    assert {"arg_parse", "initialize_megatron", "model_init"} <= megatron  # in-process phases log no imports
    root = roots[0][0]
    attributes = _attrs(root)
    assert attributes["nvrx.cycle"] == 0 and "nemo.run.id" not in attributes  # the run is the resource's
    assert attributes["lifecycle.plan"] == "training" and len(attributes["lifecycle.config_fingerprint"]) == 64
    resources = [_attrs(r.resource) for r in message.resource_spans]
    assert [(r["dl.rank"], r["service.instance.id"]) for r in resources] == [(0, "run-a-rank0"), (1, "run-a-rank1")]
    assert all(r["nemo.run.id"] == r["run_uuid"] == "run-a" and r["dl.world_size"] == 2 for r in resources)
    assert all(r["service.name"] == "megatron" and r["nvrx.cycle"] == 0 for r in resources)
    assert all(c.parent_span_id for c in children) and root.status.code == 0


def test_failures_are_error_status_and_violations_span_events(failed_logs: Path) -> None:
    message = encoder.encode_spans(spans(load([str(failed_logs)])))
    roots = {r[0].trace_id: r[0] for k, r in _by_rank(message).items() if k >= 0}
    error = 2  # STATUS_CODE_ERROR
    assert all(r.status.code == error for r in roots.values())
    failed = [c for c in _by_rank(message)[-1] if c.name == "init_distributed (not completed)"]
    assert len(failed) == 4 and all(c.status.code == error for c in failed)
    events = {e.name: _attrs(e) for c in _by_rank(message)[-1] for e in c.events}
    assert events["tripwire_violation"]["lifecycle.kind"] == "violation"
    assert events["peer_failed"]["lifecycle.peer_rank"] == 2
    assert "CUDA out of memory" in _by_rank(message)[2][0].status.message


def test_without_the_sdk_the_error_names_the_extra(
    tmp_path: Path, clean_logs: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "opentelemetry.sdk", None)
    assert main(["export", str(clean_logs), "--format", "otlp-json", "-o", str(tmp_path / "o.json")]) == 2
    assert "pip install megatron-lifecycle[otel]" in capsys.readouterr().err


def test_importing_the_export_loads_no_opentelemetry_torch_or_megatron() -> None:
    import subprocess
    import sys

    code = (
        "import sys, lifecycle.export, lifecycle.cli.export, lifecycle.cli.report; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'opentelemetry', 'torch', 'megatron'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
