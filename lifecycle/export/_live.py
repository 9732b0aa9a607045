"""`logging.otel`: the running lifecycle writes its OpenTelemetry spans as it goes.

A sink of the startup log (`AuditLog.add_sink`): each record, once written to the hash-chained
file, is fed to the audit's own per-record reader (`RankAudit`) and to the export's detail picker,
and the spans are made from them by the same functions `lifecycle export --format otlp-json` uses
(`_otlp`): the same names, ids, times, attributes, events and status. A state's span is written
when its `transition_completed` is; the rank's `megatron.startup` root when the rank shuts down
(or when the log closes). What the audit can only say across ranks (root causes) is not here.

Written to a file as OTLP JSON lines (one request per line, as the OpenTelemetry Collector's file
exporter writes), appended with one write per line so that the ranks of a machine can share it; or
sent to an OTLP/HTTP endpoint by the SDK's batch processor (`opentelemetry-exporter-otlp`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Sequence
from typing import TYPE_CHECKING

import orjson

from lifecycle.audit import RankAudit
from lifecycle.export import _otlp
from lifecycle.export._details import _KEEP, Details, Mark, _take
from lifecycle.export._encode import encode
from lifecycle.export._model import _rank
from lifecycle.export._reads import Started, read
from lifecycle.log import AuditLog, events, records
from lifecycle.redaction import redact_text

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    from opentelemetry.trace import Span

_OPEN = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK  # a FIFO never blocks
_SHUT_DOWN = "SHUT_DOWN"
_SAMPLE = 4096
"""How much of an existing file is read to tell it is ours: our first line's scope is well inside it."""


class LiveSpans:
    """One rank's spans, made from its log's records as they are written (`__call__(line)`)."""

    def __init__(self, processor: SpanProcessor, exporter: _FileExporter | None = None) -> None:
        self._processor = processor
        self._exporter = exporter
        self._sdk = _otlp.sdk()
        self._ids = _otlp.make_ids()
        self._providers: dict[tuple[str | None, int, int], TracerProvider] = {}
        self._audit = RankAudit("live")
        self._details = Details()
        self._lineno = 0
        self._root: Span | None = None
        self._start = self._end = 0.0
        self._done = 0  # segments already written as spans
        self._findings = 0
        self._finished = False
        self._pending: list[Mark] = []

    def __call__(self, line: bytes) -> None:
        record = line.rstrip(b"\n")
        rec = orjson.loads(record)
        match rec:  # a continued file: the chain goes on from where it was (else `feed` refuses it)
            case {"seq": int(seq), "prev_hash": str(prev)} if self._lineno == 0:
                self._audit.next_seq, self._audit.prev = seq, prev
        self._lineno += 1
        marks = len(self._details.marks)
        self._audit.feed(rec, record, self._lineno)  # its envelope checked: LogUnreadable if not
        event = rec["event"]
        typed = read(self._audit.source, self._lineno, event if event in _KEEP else None, rec)
        if typed is None:  # no rank or time: the audit refused it
            return
        ts = self._details.line_ts[self._lineno] = typed.ts
        if event in _KEEP:
            _take(self._details, typed)
        ending = self._audit.state == _SHUT_DOWN and event == events.TRANSITION_COMPLETED
        if ending:  # the log's end: the rules on the whole log, before the last state's span is written
            self._finish_audit()
        self._pending += self._details.marks[marks:] + self._new_findings()
        if event == events.LIFECYCLE_STARTED or self._lineno == 1:
            self._open_root(typed.attempt if isinstance(typed, Started) else None, ts)
        root = self._root
        if root is not None:
            self._write_segments(root)
            if ending:
                self._close_root(root)
        fault = getattr(self._exporter, "fault", None)
        if fault is not None:  # the log drops this sink and says why in one `warning` record
            raise fault

    def close(self) -> None:
        """The log is closing: the root (and a transition that never completed) end here; then flush."""
        if self._root is not None:
            self._close_root(self._root)
        for provider in self._providers.values():
            provider.shutdown()

    def _open_root(self, number: int | None, ts: float) -> None:
        """The root span of attempt `number` (0 when the record that opens it has none)."""
        if self._root is not None:
            self._close_root(self._root)
        attempt = number or 0
        key = (self._audit.run_id, self._audit.rank or 0, attempt)
        if key not in self._providers:
            self._providers[key] = self._sdk(
                resource=_otlp.resource(*key, self._audit.world_size), id_generator=self._ids, shutdown_on_exit=False
            )  # `close` shuts it down
            self._providers[key].add_span_processor(self._processor)
        self._tracer = self._providers[key].get_tracer(_otlp.SCOPE)
        self._attempt = attempt
        _otlp.seed(self._ids, self._audit.run_id, self._audit.rank or 0, attempt)
        self._start = self._end = ts
        self._root = self._tracer.start_span(_otlp.ROOT, start_time=_otlp.nanos(self._start))

    def _write_segments(self, root: Span) -> None:
        for seg in self._audit.segments[self._done :]:
            self._end = max(self._end, seg.end)
            child = _otlp.child_span(self._tracer, root, seg, self._audit.counts)
            self._place(root, [(seg.start, seg.end, child)])
            child.end(end_time=_otlp.nanos(seg.end))
        self._done = len(self._audit.segments)

    def _place(self, root: Span, children: list[tuple[float, float, Span]], *, last: bool = False) -> None:
        """The held marks that these spans (or, `last`, the root) hold become their events."""
        held = sorted(self._pending, key=lambda m: m.ts)
        placed = [m for m in held if any(b <= m.ts <= e for b, e, _ in children) or last]
        _otlp.place_events(placed, root, children, self._start, self._end)
        self._pending = [m for m in held if m not in placed]

    def _new_findings(self) -> list[Mark]:
        found = self._audit.findings()
        new, self._findings = found[self._findings :], len(found)
        return [
            Mark(ts=self._details.line_ts[f.line], event=f.rule, kind="finding", detail=f.message[:300], rule=f.rule)
            for f in new
            if f.line is not None and f.line in self._details.line_ts
        ]

    def _finish_audit(self) -> None:
        if not self._finished:
            self._finished = True
            self._audit.finish()

    def _close_root(self, root: Span) -> None:
        self._finish_audit()
        self._pending += self._new_findings()
        trace = _rank(self._audit, self._details)
        started = next((a for a in trace.attempts if a.attempt == self._attempt), None)
        root.set_attributes(_otlp.root_attributes(trace, self._attempt, started))
        children = []
        if trace.unfinished is not None:
            trigger, begin, stop = trace.unfinished
            children.append((begin, stop, _otlp.unfinished_span(self._tracer, root, trigger, begin)))
            self._end = max(self._end, stop)
        failure = self._audit.failure
        if failure is not None and failure.ts is not None:  # a failure logged after the last state's work
            self._end = max(self._end, failure.ts)
        self._place(root, children, last=True)
        _otlp.finish(root, children, self._audit.failure, bool(children), self._end)
        self._root = None


def live_spans(target: str) -> LiveSpans:
    """The sink for `logging.otel`: an http(s) OTLP endpoint, else a file of OTLP JSON lines.
    Raises ExtraNotInstalled (no SDK or exporter) or OSError (the file cannot be had)."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    _otlp.sdk()
    if target.strip().lower().startswith(("http://", "https://")):
        return LiveSpans(BatchSpanProcessor(_endpoint(target.strip()), export_timeout_millis=5000))
    exporter = _FileExporter(target)
    return LiveSpans(SimpleSpanProcessor(exporter), exporter)  # type: ignore[arg-type]  # a SpanExporter's methods


def _endpoint(url: str) -> SpanExporter:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found,unused-ignore]
            OTLPSpanExporter,
        )
    except ImportError as exc:
        from lifecycle.errors import ExtraNotInstalled

        raise ExtraNotInstalled(
            "an OTLP endpoint needs opentelemetry-exporter-otlp, which is not installed: "
            "pip install opentelemetry-exporter-otlp",
            extra="otel",
        ) from exc
    exporter: SpanExporter = OTLPSpanExporter(endpoint=url, timeout=5)
    _redact_sdk_logs()
    return exporter


class _Redacting(logging.Filter):
    """The SDK's own log lines (a failed export names the URL) pass through `redact_text`."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = redact_text(record.getMessage()), None
        return True


def _redact_sdk_logs() -> None:
    """On each OpenTelemetry logger there is (a logger's filters do not reach its children's lines)."""
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if (
            name.startswith("opentelemetry")
            and isinstance(logger, logging.Logger)
            and not any(isinstance(f, _Redacting) for f in logger.filters)
        ):
            logger.addFilter(_Redacting())


class _FileExporter:
    """A SpanExporter writing each batch as one OTLP JSON line, with one `write` on an append-only
    descriptor. Only a new file, or one that already holds OTLP JSON lines, is written to; a link is
    refused. A failed write raises in `check` (the sink is then dropped, and the log says why)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, _OPEN, 0o644)
        self.fault: OSError | None = None
        problem = _not_ours(self.fd)
        if problem is not None:
            os.close(self.fd)
            raise PermissionError(f"logging.otel {path!r} {problem}: nothing was written to it; choose a new file")

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        from opentelemetry.sdk.trace.export import SpanExportResult

        data = orjson.dumps(encode(spans)) + b"\n"
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError as exc:
            self.fault = self.fault or exc
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:  # each provider (restart cycle) shuts its processor down: once here
        fd, self.fd = self.fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def force_flush(self, timeout_millis: int = 0) -> bool:
        return True


def _not_ours(fd: int) -> str | None:
    """Why the opened file must not be written: a block device, or a file holding something else."""
    st = os.fstat(fd)
    if stat.S_ISBLK(st.st_mode):
        return "is a block device"
    if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
        return None
    head = os.pread(fd, _SAMPLE, 0)
    return None if _otlp.ours(head) else "is a file holding something else than OTLP JSON lines"


def attach(log: AuditLog, target: str | None) -> None:
    """Feed `log`'s records to live spans for `target` (logging.otel) from now on, the held ones
    included. When that cannot start, one `warning` record says why and the run goes on."""
    if not target:
        return
    try:
        sink = live_spans(target)
    except Exception as exc:  # the spans are a view: never a reason to stop the run
        log.write(
            records.WarningRecorded(
                category="OtelExportFailed",
                module="lifecycle.export",
                message=redact_text(f"logging.otel {target!r}: {type(exc).__name__}: {exc}")[:500],
                lineno=None,
            )
        )
        return
    log.add_sink(sink)
