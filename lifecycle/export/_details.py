"""What the export keeps of each rank file beyond the audit's summary (coordinates, attempts,
steps, violations, peer failures, and the time of each record a finding points at).

`Collect` picks them as the audit decodes each record (a tap on its batches), so the logs are
decoded once; `read_details` reads a file again (the first rank's, for its configs, and the
reference the taps are tested against), `line_times` the lines findings point at. The audit has
already checked every record (hash chain, envelope, order); these only pick, each record read as
its event's struct (`_reads.READ_TYPES`: one whose field has another type is unreadable, as in the
audit). In a second read a line's event is found in its bytes (the writer sorts keys, so
`"event":"..."` is there verbatim) and only the lines of the events kept are parsed: most of a log
(transitions, side effects) is skipped without being decoded.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter
from typing import ClassVar, Protocol, cast

import msgspec
import orjson

from lifecycle.export import _reads
from lifecycle.export._reads import MARKS, READ_TYPES, AnyStep, Marked, Read, Step, read
from lifecycle.log import JSONValue, events

_KEEP = frozenset(READ_TYPES)
"""The events whose records the export keeps something of."""
_FIND = re.compile(b'"event":"(' + b"|".join(sorted(e.encode() for e in _KEEP)) + b')"')
"""The writer sorts keys, so a record's event is in its bytes as `"event":"<name>"`; a string value
cannot hold it unescaped (its quotes would be escaped)."""
_MAX_MARKS = 200
_MAX_STEPS = 100_000
_loads = orjson.loads
_STEP = events.STEP_COMPLETED
_OTHERS = _KEEP - {_STEP}
_EVENT, _TS = attrgetter("event"), attrgetter("ts")
_STEP_FIELDS = (attrgetter("rank"), attrgetter("step"), attrgetter("loss"), attrgetter("duration_s"))
_SIZES = ("tp", "pp", "cp", "ep", "dp", "vpp")
_StepRow = tuple[float, int, float | None, float | None]
"""A step as kept: (time, step, loss, duration_s)."""
Config = dict[str, JSONValue]
"""A `config_validated` record's config: nested JSON objects."""
Where = tuple[str, int]
"""A record's file and line (1-based): what a refusal names."""


class _Step(Protocol):
    """The audit's typed record (`lifecycle.audit.Tap`), its envelope checked (`event`, `ts`, `rank`),
    with the fields of a step (`Collect.reads`) as the schema types them, or None."""

    event: str
    ts: float
    rank: int
    step: int | None
    loss: float | None
    duration_s: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Mark:
    """One record drawn as an instant: its event, kind (`violation`, `failure`, or `finding` for a
    record an audit finding points at) and a one-line detail."""

    ts: float
    event: str
    kind: str
    detail: str
    state: str | None = None
    rule: str | None = None
    peer: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """One `lifecycle_started`: a process's start on this rank (the restart cycle is `attempt`)."""

    ts: float
    attempt: int
    restart_count: int | None
    host: str | None
    pid: int | None
    plan: str | None


@dataclass(slots=True)
class Details:
    """What the export keeps of one rank's log."""

    coords: dict[str, int] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    attempts: list[Attempt] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    steps: list[_StepRow] = field(default_factory=list)
    configs: list[tuple[float, str | None, Config | None]] = field(default_factory=list)
    generations: list[tuple[float, int]] = field(default_factory=list)
    line_ts: dict[int, float] = field(default_factory=dict)


def read_details(path: str, lines_wanted: Collection[int] = (), *, configs: bool = True) -> dict[int, Details]:
    """rank -> Details for the records of the file at `path`. `lines_wanted` (1-based) get their
    time recorded in `line_ts`; `configs` keeps each `config_validated`'s config dict. LogUnreadable
    when a field read is of another type than the log's schema says."""
    out: dict[int, Details] = {}
    with open(path, "rb") as fh:
        data = fh.read()
    lines = data.splitlines()
    if not _whole(out, path, lines, configs):
        _by_line(out, path, data, configs)
    if lines_wanted:
        wanted = set(lines_wanted)
        for lineno, line in enumerate(lines, 1):
            if lineno in wanted:
                _record(out, (path, lineno), line, None, configs)
    return out


_decode_all = msgspec.json.Decoder(list[AnyStep]).decode
"""Any record, for the first look: its event, rank and time, and what a step has."""
_decode_steps = msgspec.json.Decoder(list[Step]).decode


def _whole(out: dict[int, Details], source: str, lines: list[bytes], configs: bool) -> bool:
    """The file decoded in one call (C), then only its wanted records looked at; False when some
    line does not decode so (damaged, or a field of another type): then line by line."""
    try:
        records = _decode_all(b"[" + b",".join(lines) + b"]")
    except msgspec.DecodeError:
        return False
    steps: list[AnyStep] = []
    for i in compress(range(len(records)), map(_KEEP.__contains__, map(_EVENT, records))):
        rec = records[i]
        if rec.event == _STEP:
            steps.append(rec)
        else:
            _record(out, (source, i + 1), lines[i], rec.event, configs)
    _add_steps(out, ((r.rank, (r.ts, r.step or 0, r.loss, r.duration_s)) for r in steps))
    return True


def _by_line(out: dict[int, Details], source: str, data: bytes, configs: bool) -> None:
    steps: list[tuple[Where, bytes]] = []
    at, lineno = 0, 1
    for match in _FIND.finditer(data):
        start = data.rfind(b"\n", 0, match.start()) + 1
        lineno, at = lineno + data.count(b"\n", at, start), start
        end = data.find(b"\n", match.end())
        line = data[start : end if end >= 0 else len(data)]
        event = match.group(1).decode()
        if event == _STEP:
            steps.append(((source, lineno), line))
        else:
            _record(out, (source, lineno), line, event, configs)
    _steps(out, steps, configs)


def _steps(out: dict[int, Details], steps: list[tuple[Where, bytes]], configs: bool) -> None:
    """The steps of a file decoded in one call (the bulk of the records read here); a batch that
    does not decode so (a field of another type) goes record by record."""
    if not steps:
        return
    try:
        decoded = _decode_steps(b"[" + b",".join(line for _, line in steps) + b"]")
    except msgspec.DecodeError:
        for where, line in steps:
            _record(out, where, line, _STEP, configs)
        return
    _add_steps(out, ((r.rank, (r.ts, r.step or 0, r.loss, r.duration_s)) for r in decoded))


class Collect:
    """A tap on the audit (`lifecycle.audit.Tap`) for the input `source`: its details, picked from
    the records as the audit decodes them, so that the logs are decoded once. `out` ends as
    `read_details(source, configs=False)` (without line times): steps are read from the audit's
    typed records, the few other records kept are parsed from their line."""

    __slots__ = ("out", "seen", "source")
    reads: ClassVar[dict[str, tuple[str, ...]]] = {
        event: tuple(sorted({*READ_TYPES[event].__struct_fields__} - {"rank", "ts"})) for event in _KEEP - MARKS.keys()
    }
    """The fields read on the audit's typed records (`lifecycle.audit.Tap`): the kept ones' but marks'."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.out: dict[int, Details] = {}
        self.seen = 0  # the lines given so far: the audit gives them all, in order

    def __call__(self, lines: list[bytes], recs: Sequence[object]) -> None:
        out, first, source = self.out, self.seen + 1, self.source
        self.seen += len(lines)
        if not recs or not isinstance(recs[0], msgspec.Struct):  # parsed by orjson: any JSON value
            for lineno, rec in enumerate(recs, first):
                match rec:
                    case {"event": str(event)} if event in _KEEP:
                        _put(out, (source, lineno), cast("JSONValue", rec), event, False)
            return
        typed = cast("Sequence[_Step]", recs)  # a batch's records are all typed, or none is
        evs = list(map(_EVENT, typed))
        for i in compress(range(len(recs)), map(_OTHERS.__contains__, evs)):  # the few kept that are not steps
            if evs[i] in MARKS:
                _record(out, (source, first + i), lines[i], evs[i], False)
            else:  # the audit's record, each field of its schema type already, as the details' struct (C)
                _take(_of(out, typed[i].rank), msgspec.convert(typed[i], READ_TYPES[evs[i]], from_attributes=True))
        steps = [typed[i] for i in compress(range(len(recs)), map(_STEP.__eq__, evs))]
        if steps:
            _typed_steps(out, steps)


def _typed_steps(out: dict[int, Details], steps: list[_Step]) -> None:
    """The steps of a batch of typed records: at once (C) when they are of one rank and hold each
    field, else one by one."""
    ranks, nums, losses, times = (list(map(get, steps)) for get in _STEP_FIELDS)
    if len(set(ranks)) == 1 and None not in nums and None not in losses and None not in times:
        details = _of(out, ranks[0])
        room = _MAX_STEPS - len(details.steps)
        if room > 0:
            details.steps += list(zip(map(_TS, steps[:room]), nums[:room], losses[:room], times[:room], strict=True))
        return
    _add_steps(out, ((r.rank, (r.ts, r.step or 0, r.loss, r.duration_s)) for r in steps))


def _add_steps(out: dict[int, Details], steps: Iterable[tuple[int, _StepRow]]) -> None:
    """Each (rank, step) onto its rank's steps, up to _MAX_STEPS a rank (the one place steps are
    kept one by one; `_typed_steps` adds a whole batch of one rank at once)."""
    for rank, step in steps:
        details = _of(out, rank)
        if len(details.steps) < _MAX_STEPS:
            details.steps.append(step)


def _of(out: dict[int, Details], rank: int) -> Details:
    """The details of `rank`, new ones if it has none yet."""
    details = out.get(rank)
    if details is None:
        details = out[rank] = Details()
    return details


def line_times(path: str, lines_wanted: Collection[int], out: dict[int, Details]) -> None:
    """The time of each of `lines_wanted` (1-based) of the file at `path`, into `out[rank].line_ts`."""
    wanted = set(lines_wanted)
    with open(path, "rb") as fh:
        lines = fh.read().splitlines()
    for lineno in sorted(wanted):
        if 0 < lineno <= len(lines):
            _record(out, (path, lineno), lines[lineno - 1], None, False)


def _record(out: dict[int, Details], where: Where, line: bytes, event: str | None, configs: bool) -> None:
    try:
        rec = _loads(line)
    except orjson.JSONDecodeError:
        return  # a damaged record: the audit has reported it
    _put(out, where, rec, event, configs)


def _put(out: dict[int, Details], where: Where, rec: JSONValue, event: str | None, configs: bool) -> None:
    """Keep what parsed record `rec` of `event` says (None: only its time, into `line_ts`), read as
    the schema types its fields (`_reads.read`); one without a rank and a time is the audit's."""
    typed = read(*where, event, rec, configs=configs)
    if typed is None:
        return
    details = _of(out, typed.rank)
    if event is None:
        details.line_ts[where[1]] = typed.ts
    else:
        _take(details, typed)


def _take(d: Details, rec: Read) -> None:
    """Keep what typed record `rec` says (its struct says its event: `_reads.READ_TYPES`)."""
    ts = rec.ts
    match rec:
        case Step():
            if len(d.steps) < _MAX_STEPS:
                d.steps.append((ts, rec.step or 0, rec.loss, rec.duration_s))
        case Marked():
            if len(d.marks) < _MAX_MARKS:
                d.marks.append(_mark(rec))
        case _reads.Started(attempt=attempt, restart_count=count, host=host, pid=pid, plan=plan):
            d.attempts.append(Attempt(ts=ts, attempt=attempt or 0, restart_count=count, host=host, pid=pid, plan=plan))
        case _reads.Configured():  # read from JSON: its values are JSON values
            d.configs.append((ts, rec.fingerprint, cast("Config | None", rec.config)))
        case _reads.Validated():
            d.configs.append((ts, rec.fingerprint, None))
        case _reads.Distributed():
            d.coords = dict(rec.ranks or {})
            sizes = (rec.tp, rec.pp, rec.cp, rec.ep, rec.dp, rec.vpp)
            d.sizes = {k: v for k, v in zip(_SIZES, sizes, strict=True) if v is not None}
        case _reads.Generation():
            d.generations.append((ts, rec.generation or 0))


def _mark(rec: Marked) -> Mark:
    """The fields that say what happened (`MARKS`), in one line."""
    shown = MARKS[rec.event]
    shows = ((name, getattr(rec, name)) for name in shown.detail)
    return Mark(
        ts=rec.ts,
        event=rec.event,
        kind=shown.kind,
        detail=", ".join(f"{n}={str(v)[:160]}" for n, v in shows if v not in (None, "", [])),
        state=getattr(rec, shown.state) or None if shown.state else None,
        peer=getattr(rec, shown.peer) if shown.peer else None,
    )
