"""OpenTelemetry spans of a startup, made with the opentelemetry-sdk API, written as OTLP JSON.

One trace per rank and attempt (restart cycle): a root `megatron.startup` span, as Megatron-LM
names its own, with a child per state's entry work. Ids are derived from run id, rank and attempt,
so exporting the same logs twice gives the same file. The JSON follows the OTLP encoding
(`_encode.encode`).

What NVIDIA's `nemo-lens` (0.1.0, the OpenTelemetry layer of Megatron-LM, NeMo-RL and NeMo-Gym)
also describes carries its name (`NEMO_LENS`): the run, the rank, the world size and the rank's
parallel coordinates, on a resource of the rank's process as its `setup_telemetry` makes one.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from lifecycle.audit import Failure, Segment, no_gc, write_output
from lifecycle.errors import ExtraNotInstalled
from lifecycle.export._details import Attempt, Mark
from lifecycle.export._encode import encode
from lifecycle.export._model import COORDINATES, RankTrace, Trace
from lifecycle.log import events
from states import State

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.trace import Span, Tracer
    from opentelemetry.util.types import AttributeValue

    from lifecycle.export._sdk import Collector, Ids

ROOT = "megatron.startup"
SCOPE = "megatron-lifecycle"
SCOPE_MARK = b'"scope":{"name":"' + SCOPE.encode() + b'"'
"""How every resource's spans of ours name their scope in OTLP JSON."""
MEGATRON_SPANS = {
    events.IMPORTS: "imports",
    State.VALIDATED.name: "arg_parse",
    State.DISTRIBUTED.name: "initialize_megatron",
    State.MODEL_BUILT.name: "model_init",
}
"""States that do the work of a Megatron-LM startup span: the span carries `megatron.span`."""
RUN_ID, RANK, WORLD_SIZE, ITERATION = "nemo.run.id", "dl.rank", "dl.world_size", "dl.iteration"
COORDINATE_NAMES = {
    "tp": "dl.tensor_parallel.rank",
    "pp": "dl.pipeline_parallel.rank",
    "dp": "dl.data_parallel.rank",
    "cp": "lifecycle.cp",
    "ep": "lifecycle.ep",
}
"""This rank's coordinates: nemo-lens names three (`nemo.lens.semconv`); it has none for cp and ep."""
NEMO_LENS = (RUN_ID, RANK, WORLD_SIZE, ITERATION, *list(COORDINATE_NAMES.values())[:3])
"""The names taken from nemo-lens 0.1.0 (`nemo.lens.semconv`; `service.instance.id` as its
`setup_telemetry` writes it, `<run id>-rank<rank>`)."""


def ours(head: bytes) -> bool:
    """OTLP JSON we wrote (a document, or `--follow`'s lines): the only file written over or appended to.
    An OpenTelemetry Collector's file exporter begins `{"resourceSpans":` too: ours names our
    instrumentation scope, after the first resource's attributes."""
    return head.startswith(b'{"resourceSpans":') and SCOPE_MARK in head


def sdk() -> type[TracerProvider]:
    """The opentelemetry SDK's TracerProvider, or ExtraNotInstalled naming the extra."""
    try:
        from opentelemetry.sdk import trace as sdk_trace
    except ImportError as exc:
        raise ExtraNotInstalled(
            "OpenTelemetry export needs opentelemetry-sdk, which is not installed: "
            "pip install megatron-lifecycle[otel]",
            extra="otel",
        ) from exc
    return sdk_trace.TracerProvider


def spans(trace: Trace) -> list[ReadableSpan]:
    """The startup as finished SDK spans (`ReadableSpan`), rank by rank, attempt by attempt."""
    provider = sdk()
    ids = make_ids()
    collected = _collector()
    providers: dict[tuple[str | None, int, int], TracerProvider] = {}
    for rank in trace.ranks:
        for attempt, parts in _attempts(rank):
            key = (rank.audit.run_id, rank.rank, attempt)
            if key not in providers:
                providers[key] = provider(
                    resource=resource(*key, rank.audit.world_size), id_generator=ids, shutdown_on_exit=False
                )
                providers[key].add_span_processor(collected)
            tracer = providers[key].get_tracer(SCOPE)
            _rank_spans(tracer, ids, rank, attempt, parts, trace)
    return list(collected.spans)


def resource(run_id: str | None, rank: int, attempt: int, world_size: int | None) -> Resource:
    """The resource of a rank's process in one restart cycle, as nemo-lens makes it: the run
    (`nemo.run.id`), `dl.rank`, `dl.world_size`, and `service.instance.id` `<run id>-rank<rank>`
    (the SDK would draw a random one: the same logs, or the live spans of the run, would not give
    the same resource); with Megatron-LM's `run_uuid` and `nvrx.cycle`. The SDK's `Resource.create`
    (0.37 ms: it loads its detectors) runs once per run and cycle; a rank's part is merged in (18 µs)."""
    from opentelemetry.sdk.resources import Resource

    rank_part: dict[str, AttributeValue] = {"service.instance.id": f"{run_id or ''}-rank{rank}", RANK: rank}
    rank_part[WORLD_SIZE] = world_size or 0
    return _cycle(run_id or "", attempt).merge(Resource(rank_part))


@functools.lru_cache(maxsize=64)
def _cycle(run_id: str, attempt: int) -> Resource:
    from opentelemetry.sdk.resources import Resource

    return Resource.create({"service.name": "megatron", RUN_ID: run_id, "run_uuid": run_id, "nvrx.cycle": attempt})


def make_ids() -> Ids:
    """The SDK's id generator, fed the next ids (`seed`): deterministic spans from the logs."""
    from lifecycle.export._sdk import Ids

    return Ids()


def seed(ids: Ids, run_id: str | None, rank: int, attempt: int) -> None:
    """The trace id of a rank's attempt, and its span ids in the order the spans start."""
    key = (run_id, rank, attempt)
    ids.trace_id = int.from_bytes(_digest(*key)[:16], "big") or 1
    ids.span_ids = (int.from_bytes(_digest(*key, n)[:8], "big") or 1 for n in range(1 << 30))


def _collector() -> Collector:
    """A span processor that keeps each ended span, in the order they end."""
    from lifecycle.export._sdk import Collector

    return Collector()


def _digest(*parts: object) -> bytes:
    return hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()


def _attempts(rank: RankTrace) -> Iterator[tuple[int, list[Segment]]]:
    numbers = [a.attempt for a in rank.attempts] or [0]
    for number in dict.fromkeys(numbers):
        yield number, [seg for seg, attempt in rank.segments if attempt == number]


def _rank_spans(tracer: Tracer, ids: Ids, rank: RankTrace, attempt: int, segments: list[Segment], trace: Trace) -> None:
    seed(ids, rank.audit.run_id, rank.rank, attempt)
    started = next((a for a in rank.attempts if a.attempt == attempt), None)
    last_attempt = not rank.attempts or attempt == rank.attempts[-1].attempt
    unfinished = rank.unfinished if last_attempt else None
    ends = [s.end for s in segments] + ([unfinished[2]] if unfinished else [])
    start = started.ts if started is not None else min((s.start for s in segments), default=trace.t0)
    failure = rank.audit.failure if last_attempt else None
    end = max([*ends, *([failure.ts] if failure is not None and failure.ts is not None else [])], default=start)
    root = tracer.start_span(ROOT, start_time=nanos(start), attributes=root_attributes(rank, attempt, started))
    children = [(seg.start, seg.end, child_span(tracer, root, seg, rank.counts)) for seg in segments]
    if unfinished is not None:
        children.append((unfinished[1], unfinished[2], unfinished_span(tracer, root, unfinished[0], unfinished[1])))
    place_events(rank.marks, root, children, start, end)  # `end` reaches the failure: its record is placed
    finish(root, children, failure, unfinished is not None, end)


def child_span(tracer: Tracer, root: Span, seg: Segment, counts: dict[str, dict[str, int]]) -> Span:
    """The span of one state's entry work (or of `imports`), started under `root`."""
    from opentelemetry import trace as api

    attributes: dict[str, AttributeValue] = {
        "lifecycle.state": seg.state,
        "lifecycle.trigger": seg.trigger,
        "lifecycle.generation": seg.generation,
    }
    if seg.state in MEGATRON_SPANS:
        attributes["megatron.span"] = MEGATRON_SPANS[seg.state]
    attributes.update({f"lifecycle.{k}": v for k, v in counts.get(seg.state, {}).items()})
    name = "imports" if seg.state == events.IMPORTS else seg.state
    return tracer.start_span(
        name, context=api.set_span_in_context(root), start_time=nanos(seg.start), attributes=attributes
    )


def unfinished_span(tracer: Tracer, root: Span, trigger: str, begin: float) -> Span:
    """The span of the transition that never completed."""
    from opentelemetry import trace as api

    return tracer.start_span(
        f"{trigger} (not completed)",
        context=api.set_span_in_context(root),
        start_time=nanos(begin),
        attributes={"lifecycle.trigger": trigger, "lifecycle.completed": False},
    )


def finish(
    root: Span, children: list[tuple[float, float, Span]], failure: Failure | None, unfinished: bool, end: float
) -> None:
    """End `children` (the last one, when `unfinished`, with the failure's status ERROR), then the root."""
    from opentelemetry.trace import Status, StatusCode

    for _, stop, child in children:
        if failure is not None and child is children[-1][2] and unfinished:
            child.set_status(Status(StatusCode.ERROR, failure.message[:500]))
        child.end(end_time=nanos(stop))
    if failure is not None:
        root.set_status(Status(StatusCode.ERROR, failure.message[:500]))
    root.end(end_time=nanos(max(end, failure.ts or end) if failure is not None else end))


def root_attributes(rank: RankTrace, attempt: int, started: Attempt | None) -> dict[str, AttributeValue]:
    """The root's own attributes (the run, the rank and the world size are the resource's)."""
    audit = rank.audit
    out: dict[str, AttributeValue] = {
        "nvrx.cycle": attempt,
        "lifecycle.plan": audit.plan or "",
        "lifecycle.target": audit.target,
        "lifecycle.final_state": audit.state,
    }
    out.update({COORDINATE_NAMES[k]: rank.coords[k] for k in COORDINATES if k in rank.coords})
    if audit.fingerprint:
        out["lifecycle.config_fingerprint"] = audit.fingerprint
    if started is not None:
        out.update(
            {
                k: v
                for k, v in (
                    ("host.name", started.host),
                    ("process.pid", started.pid),
                    ("lifecycle.restart_count", started.restart_count),
                )
                if v is not None
            }
        )
    if rank.steps:
        out["lifecycle.steps"] = len(rank.steps)
        out[ITERATION] = rank.steps[-1][1]  # the last step's number
    return out


def place_events(
    marks: Sequence[Mark], root: Span, children: list[tuple[float, float, Span]], start: float, end: float
) -> None:
    """Violations and failures as span events on the state's span that holds them, else the root."""
    for mark in marks:
        if not start <= mark.ts <= end:
            continue
        holder = next((c for b, e, c in children if b <= mark.ts <= e), root)
        attributes: dict[str, str | int] = {"lifecycle.kind": mark.kind, "lifecycle.detail": mark.detail}
        attributes.update(
            {
                k: v
                for k, v in (
                    ("lifecycle.rule", mark.rule),
                    ("lifecycle.state", mark.state),
                    ("lifecycle.peer_rank", mark.peer),
                )
                if v is not None
            }
        )
        holder.add_event(mark.event, attributes=attributes, timestamp=nanos(mark.ts))


_UINT63 = (1 << 63) - 1


def nanos(ts: float) -> int:
    """Unix nanoseconds, held to 0 .. 2**63 - 1 (OTLP's times are unsigned 64-bit, the SDK's signed):
    an impossible timestamp (LA022) gives a span at a useless time, never an error."""
    ns = ts * 1e9
    return 0 if not ns > 0 else _UINT63 if ns >= _UINT63 else round(ns)


def write_otlp(trace: Trace, output: str | Path) -> Path:
    """Write the startup's spans to `output` as OTLP JSON (`write_output`: whole or not at all, and
    only over OTLP JSON we wrote)."""
    with no_gc():
        data = orjson.dumps(encode(spans(trace)))
    return write_output(output, data, ours=ours)
