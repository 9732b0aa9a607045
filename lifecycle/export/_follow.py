"""`lifecycle export --follow`: spans written while the run goes, not only afterwards.

Follows the rank files of a log directory as the ranks write them and, through the
opentelemetry-sdk, ends a state's span as soon as its `transition_completed` (or the failure) is
written, and a rank's `megatron.startup` root span when the rank shuts down or fails. Each span is
written at once as one OTLP JSON request per line (JSON Lines, as the OpenTelemetry Collector's
file exporter writes them). The records are not checked here (`lifecycle audit` does that after),
but each field read is read as the log's schema types it (`_reads.FOLLOW_TYPES`): a record whose field
has another type ends the following with LogUnreadable naming its file, line, event and field, the
spans still open ended with that error.
The output is appended to only when it is OTLP JSON we wrote (`lifecycle.audit.Appender`); a
failed write (a full disk) ends the following with that OSError, the lines before it whole.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from lifecycle.audit import Appender
from lifecycle.errors import LogUnreadable
from lifecycle.export import _reads
from lifecycle.export._otlp import MEGATRON_SPANS, ROOT, SCOPE, nanos, ours, resource, sdk
from lifecycle.log import Tail, events

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

_DONE_STATES = {"SHUT_DOWN", "FAILED"}


class _Rank:
    """One rank file being followed: how far it was read, its open root and state spans."""

    def __init__(self, path: Path) -> None:
        self.tail = Tail(path)
        self.lines = 0  # read so far
        self.root: Span | None = None
        self.tracer: Tracer | None = None  # of the root's resource
        self.open: dict[str, tuple[Span, float]] = {}
        self.done = False


def follow(
    log_dir: str | Path,
    output: str | Path,
    *,
    idle_timeout_s: float = 60.0,
    poll_s: float = 0.2,
    stop: Callable[[], bool] | None = None,
) -> int:
    """Follow `log_dir` until every rank of the world size is done (shut down or failed) or nothing was written
    for `idle_timeout_s`; `stop()` returning True ends it early. Returns the spans written. Raises
    OSError when `output` is not ours to append to, or a write fails."""
    provider = sdk()
    from lifecycle.export._sdk import LineExporter

    ranks: dict[Path, _Rank] = {}
    with Appender(output, ours=ours) as sink:
        exporter = LineExporter(sink)
        tracer = _tracers(provider, exporter)
        last_change = time.monotonic()
        world = 0
        while True:
            stopping = stop is not None and stop()  # asked before this pass: what was written is still read
            try:
                changed, world = _read_pass(Path(log_dir), ranks, tracer, world)
            except LogUnreadable as exc:  # the spans so far end with why
                for rank in ranks.values():
                    _close(rank, time.time_ns(), error=str(exc))
                raise
            now = time.monotonic()
            last_change = now if changed else last_change
            if exporter.error is not None:
                raise exporter.error
            finished = len(ranks) >= world > 0 and all(r.done for r in ranks.values())
            if finished or now - last_change > idle_timeout_s or stopping:
                break
            time.sleep(poll_s)
        for rank in ranks.values():  # what never ended: closed now, as far as the log went
            _close(rank, time.time_ns(), error="the log stops here")
    if exporter.error is not None:
        raise exporter.error
    return exporter.count


Tracers = Callable[[str, int, int, "int | None"], "Tracer"]


def _tracers(provider: type[TracerProvider], exporter: SpanExporter) -> Tracers:
    """The tracer of a rank's process in a restart cycle (`_otlp.resource`), its spans written by
    `exporter` as they end."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    providers: dict[tuple[str, int, int], TracerProvider] = {}

    def tracer(run_id: str, rank: int, attempt: int, world_size: int | None) -> Tracer:
        key = (run_id, rank, attempt)
        if key not in providers:
            providers[key] = provider(resource=resource(run_id, rank, attempt, world_size), shutdown_on_exit=False)
            providers[key].add_span_processor(SimpleSpanProcessor(exporter))
        return providers[key].get_tracer(SCOPE)

    return tracer


def _read_pass(log_dir: Path, ranks: dict[Path, _Rank], tracer: Tracers, world: int) -> tuple[bool, int]:
    """One pass over the rank files: each new record applied to its rank's spans. Returns whether
    anything was new and the largest world size seen."""
    changed = False
    for path in sorted(log_dir.glob("rank-*.jsonl")):
        rank = ranks.setdefault(path, _Rank(path))
        for rec in _new_records(path, rank):
            changed = True
            world = max(world, rec.world_size or 0)
            _apply(tracer, rank, rec, rec.ts or 0.0)
    return changed, world


def _new_records(path: Path, rank: _Rank) -> Iterator[_reads.Followed]:
    """The records completed since the last pass, typed (`_reads.followed`) one at a time, so that
    those before a refused one are applied; one that is not JSON, of no known event or without its
    time is skipped. LogUnreadable for a field of another type."""
    for line in rank.tail.read():
        rank.lines += 1
        try:
            rec = _reads.followed(str(path), rank.lines, orjson.loads(line))
        except orjson.JSONDecodeError:
            continue
        if rec is not None and rec.ts is not None:
            yield rec


def _apply(tracers: Tracers, rank: _Rank, rec: _reads.Followed, ts: float) -> None:
    from opentelemetry import trace as api

    event, ns = rec.event, nanos(ts)
    if event == events.LIFECYCLE_STARTED or (rank.root is None and not rank.done):
        _close(rank, ns, error=None)
        rank.done = False
        attempt = (rec.attempt if isinstance(rec, _reads.FollowedStart) else 0) or 0
        rank.tracer = tracers(str(rec.run_id), rec.rank or 0, attempt, rec.world_size)
        rank.root = rank.tracer.start_span(ROOT, start_time=ns, attributes={"nvrx.cycle": attempt})
    if rank.root is None or rank.tracer is None:  # after the rank's end: the records of its shutdown or FAILED
        return
    match rec:
        case _reads.FollowedTransition(trigger=trigger):
            context = api.set_span_in_context(rank.root)
            rank.open[str(trigger)] = (
                rank.tracer.start_span(f"{trigger} (running)", context=context, start_time=ns),
                ts,
            )
            return
        case _reads.FollowedCompleted():
            _completed(rank, rec, ns)
            return
        case _reads.FollowedError(error=error):  # what ends a rank says why: the error, or the signal, else the state
            detail, why = error or "", error or ""
        case _reads.FollowedSignal(signal=signal, state=state):
            detail, why = signal or "", signal or state or ""
        case _reads.FollowedTimeout(state=state):
            detail, why = "", state or ""
        case _:
            return
    rank.root.add_event(event, timestamp=ns, attributes={"lifecycle.detail": detail})
    _close(rank, ns, error=f"{event}: {why}")


def _completed(rank: _Rank, rec: _reads.FollowedCompleted, ns: int) -> None:
    """A transition's span is named for the state it reached; a rank that reached its end closes."""
    span, _ = rank.open.pop(str(rec.trigger), (None, 0.0))
    if span is not None:
        dest = str(rec.dest)
        span.update_name(dest)
        span.set_attributes(
            {"lifecycle.state": dest, "lifecycle.trigger": str(rec.trigger)}
            | ({"megatron.span": MEGATRON_SPANS[dest]} if dest in MEGATRON_SPANS else {})
        )
        span.end(end_time=ns)
    if rec.dest in _DONE_STATES:
        _close(rank, ns, error=None if rec.dest == "SHUT_DOWN" else "the rank moved to FAILED")


def _close(rank: _Rank, ns: int, *, error: str | None) -> None:
    from opentelemetry.trace import Status, StatusCode

    for span, _ in rank.open.values():
        if error:
            span.set_status(Status(StatusCode.ERROR, error[:500]))
        span.end(end_time=ns)
    rank.open.clear()
    if rank.root is not None:
        if error:
            rank.root.set_status(Status(StatusCode.ERROR, error[:500]))
        rank.root.end(end_time=ns)
        rank.root = None
    rank.done = True
