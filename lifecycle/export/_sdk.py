"""The export's classes built on the opentelemetry SDK (extra `otel`). Imports the SDK: only the
functions that need these import this module, after `_otlp.sdk()` found the SDK installed."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import orjson
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator

from lifecycle.export._encode import encode


class Ids(IdGenerator):
    """The SDK's id generator, fed the next ids (`_otlp.seed`): deterministic spans from the logs."""

    def __init__(self) -> None:
        self.trace_id = 1
        self.span_ids: Iterator[int] = iter(())

    def generate_trace_id(self) -> int:
        return self.trace_id

    def generate_span_id(self) -> int:
        return next(self.span_ids)


class Collector(SpanProcessor):
    """A span processor that keeps each ended span, in the order they end."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


class Sink(Protocol):
    """Where the lines go: each `write` whole, or an OSError (`lifecycle.audit.Appender`)."""

    def write(self, data: bytes) -> None: ...


class LineExporter(SpanExporter):
    """A SpanExporter that writes each batch to `sink` as one OTLP JSON line. A failed write (a full
    disk) is kept in `error`, not raised into the SDK (which would print its traceback), and ends
    the writing: the caller reports it."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.count = 0
        self.error: OSError | None = None

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.error is not None:
            return SpanExportResult.FAILURE
        try:
            self.sink.write(orjson.dumps(encode(spans)) + b"\n")
        except OSError as exc:
            self.error = exc
            return SpanExportResult.FAILURE
        self.count += len(spans)
        return SpanExportResult.SUCCESS
