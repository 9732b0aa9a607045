"""The OTLP export names what NVIDIA's nemo-lens (0.1.0, the OpenTelemetry layer Megatron-LM uses) also
describes as nemo-lens names it: the run, the rank, the world size, the rank's parallel coordinates and
the last iteration. A span that Megatron-LM makes through nemo-lens on the same rank, in the startup's
trace, lands beside the export's spans with the same resource: one trace, one naming scheme.

nemo-lens needs Python >= 3.13, so it is not installed here: `nemo_lens_resource` is what its
`setup_telemetry` (`nemo.lens.providers.build_providers` and `resources.detect_local`, 0.1.0) puts on
the resource of an exporting rank, and its span is made through the opentelemetry SDK as its
`managed_span` makes one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lifecycle.export import load
from lifecycle.testing import encode, spans
from tests.otlp_spans import flat_spans

pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")

import orjson

NEMO_LENS_NAMES = {"nemo.run.id", "dl.rank", "dl.world_size", "service.instance.id"}
"""The resource attributes nemo-lens 0.1.0 writes that name the run and the rank's process."""
SYNONYMS = {
    "lifecycle.run_id",
    "lifecycle.rank",
    "lifecycle.world_size",
    "lifecycle.tp",
    "lifecycle.pp",
    "lifecycle.dp",
}
"""The export's own names for those, before it took nemo-lens's."""


def nemo_lens_resource(run_id: str, rank: int, world_size: int) -> dict[str, Any]:
    """What nemo-lens 0.1.0's `setup_telemetry(NemoLensConfig(run_id=...), rank, world_size)` puts on the
    resource (service.name from OTEL_SERVICE_NAME, else its default)."""
    return {
        "service.name": "nemo",
        "service.version": "0.1.0",
        "dl.rank": rank,
        "dl.world_size": world_size,
        "nemo.run.id": run_id,
        "service.instance.id": f"{run_id}-rank{rank}",
        "host.name": "node0",
        "process.pid": 4242,
    }


def megatron_span(run_id: str, world_size: int, parent: Any) -> Any:
    """`managed_span("job", "megatron.startup.dataloader")` on rank 0, under the startup's root."""
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create(nemo_lens_resource(run_id, 0, world_size)))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    remote = trace.NonRecordingSpan(
        trace.SpanContext(parent.trace_id, parent.span_id, is_remote=True, trace_flags=trace.TraceFlags(1))
    )
    tracer = provider.get_tracer("nemo.lens")
    span = tracer.start_span("megatron.startup.dataloader", context=trace.set_span_in_context(remote))
    span.set_attribute("is_goodput_span", True)
    span.end()
    [made] = exporter.get_finished_spans()
    return made


def test_megatron_lms_span_and_the_startups_are_one_trace_under_one_naming(clean_logs: Path) -> None:
    ours = spans(load([str(clean_logs)]))
    [root] = [s for s in ours if s.name == "megatron.startup" and s.resource.attributes["dl.rank"] == 0]
    run_id, world = str(root.resource.attributes["nemo.run.id"]), int(root.resource.attributes["dl.world_size"])
    theirs = megatron_span(run_id, world, root.context)
    found = flat_spans([orjson.dumps(encode([*ours, theirs]))])  # one OTLP document, as a collector gets both

    trace_id = f"{root.context.trace_id:032x}"
    in_trace = [s for s in found.values() if s["traceId"] == trace_id]
    names = {s["name"] for s in in_trace}
    assert {"megatron.startup", "VALIDATED", "CALLBACKS_BOUND", "megatron.startup.dataloader"} <= names
    [dataloader] = [s for s in in_trace if s["name"] == "megatron.startup.dataloader"]
    assert dataloader["parentSpanId"] == f"{root.context.span_id:016x}"
    same_rank = [s["resource"] for s in in_trace]
    for name in NEMO_LENS_NAMES:  # every span of rank 0's trace, ours and Megatron-LM's, names its process alike
        assert len({orjson.dumps(r[name]) for r in same_rank}) == 1, name
    assert dataloader["resource"]["service.instance.id"] == {"stringValue": f"{run_id}-rank0"}


def test_no_span_or_resource_keeps_the_exports_own_names_for_what_nemo_lens_names(clean_logs: Path) -> None:
    ours = spans(load([str(clean_logs)]))
    keys = {k for s in ours for k in [*s.attributes, *s.resource.attributes]}
    assert not keys & SYNONYMS
    assert {"nemo.run.id", "dl.rank", "dl.world_size"} <= keys
    roots = [s for s in ours if s.name == "megatron.startup"]
    assert sorted(str(s.resource.attributes["service.instance.id"]) for s in roots) == [
        f"{roots[0].resource.attributes['nemo.run.id']}-rank{r}" for r in (0, 1)
    ]
    for root in roots:  # the last step's number beside the count
        assert root.attributes["dl.iteration"] == root.attributes["lifecycle.steps"] > 0


def test_the_ranks_coordinates_are_nemo_lens_ranks_where_it_names_them(tmp_path: Path) -> None:
    from export_logs import clean_events, clock, write_events

    ev = clean_events()
    for i, (event, fields) in enumerate(ev):
        if event == "distributed_initialized":
            ev[i] = (event, {**fields, "ranks": {"tp": 1, "pp": 0, "cp": 2, "ep": 3, "dp": 4}})
    with clock(100.0 + i for i in range(len(ev))):
        write_events(tmp_path, ev, rank=17, world=32, run_id="r")
    [root] = [s for s in spans(load([str(tmp_path)])) if s.name == "megatron.startup"]
    named = {k: v for k, v in root.attributes.items() if k.startswith("dl.") or k in ("lifecycle.cp", "lifecycle.ep")}
    coordinates = {"dl.tensor_parallel.rank": 1, "dl.pipeline_parallel.rank": 0, "dl.data_parallel.rank": 4}
    assert {k: named[k] for k in [*coordinates, "lifecycle.cp", "lifecycle.ep"]} == {
        **coordinates,
        "lifecycle.cp": 2,  # nemo-lens 0.1.0 names no context- or expert-parallel rank
        "lifecycle.ep": 3,
    }
    resource = root.resource.attributes
    assert (resource["dl.rank"], resource["dl.world_size"], resource["service.instance.id"]) == (17, 32, "r-rank17")
