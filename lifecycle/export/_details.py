"""What the export keeps of each rank file beyond the audit's summary (coordinates, attempts,
steps, violations, peer failures, and the time of each record a finding points at).

`Collect` picks them as the audit decodes each record (a tap on its batches), so the logs are
decoded once; `read_details` reads a file again (the first rank's, for its configs, and the
reference the taps are tested against), `line_times` the lines findings point at. The audit has
already checked every record (hash chain, envelope, order); these only pick. In a second read a
line's event is found in its bytes (the writer sorts keys, so `"event":"..."` is there verbatim)
and only the lines of the events below are parsed: most of a log (transitions, side effects) is
skipped without being decoded.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter
from typing import ClassVar, Protocol, Union, cast

import msgspec
import orjson

from lifecycle.log import JSONValue, events

MARKS = {
    events.TRIPWIRE_VIOLATION: "violation",
    events.SIDE_EFFECT_REFUSED: "violation",
    events.GUARD_REJECTED: "violation",
    events.INVALID_TRANSITION: "violation",
    events.CONFIG_MUTATED: "violation",
    events.FIRST_STEP_NOT_FINALIZED: "violation",
    events.PEER_FAILED: "failure",
    events.STATE_TIMEOUT: "failure",
    events.STARTUP_ABORTED: "failure",
    events.SIGNAL_RECEIVED: "failure",
    events.TRANSITION_FAILED: "failure",
    events.LOG_WRITE_FAILED: "failure",
}
"""Events drawn as instants, and their kind."""
_KEEP = frozenset(
    {
        *MARKS,
        events.LIFECYCLE_STARTED,
        events.CONFIG_VALIDATED,
        events.DISTRIBUTED_INITIALIZED,
        events.STEP_COMPLETED,
        events.GENERATION_STARTED,
    }
)
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
_StepRow = tuple[float, int, float | None, float | None]
"""A step as kept: (time, step, loss, duration_s)."""
Config = dict[str, JSONValue]
"""A `config_validated` record's config: nested JSON objects."""


class _Record(Protocol):
    """A record as read here: a parsed dict, or the audit's typed record (`lifecycle.audit.Tap`);
    a field is any JSON value, None when absent."""

    def get(self, key: str, /) -> JSONValue: ...


class _Typed(_Record, Protocol):
    """The audit's typed record: its envelope checked (`event`, `ts`, `rank`), and as attributes the
    fields of `Collect.reads` (those of a step below), each of its type in the log's schema or None
    (`lifecycle.log.schema.read_type`; a line with another type is parsed by orjson instead)."""

    @property
    def event(self) -> str: ...
    @property
    def ts(self) -> float: ...
    @property
    def rank(self) -> int: ...
    @property
    def step(self) -> JSONValue: ...
    @property
    def loss(self) -> JSONValue: ...
    @property
    def duration_s(self) -> JSONValue: ...


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
    time recorded in `line_ts`; `configs` keeps each `config_validated`'s config dict."""
    out: dict[int, Details] = {}
    with open(path, "rb") as fh:
        data = fh.read()
    lines = data.splitlines()
    if not _whole(out, lines, configs):
        _by_line(out, data, configs)
    if lines_wanted:
        wanted = set(lines_wanted)
        for lineno, line in enumerate(lines, 1):
            if lineno in wanted:
                _record(out, line, None, configs, lineno)
    return out


class _Any(msgspec.Struct, gc=False):
    """Any record, for the first look: its event, and what a step has."""

    event: str
    ts: float
    rank: int
    step: Union[int, None] = None  # noqa: UP007  # msgspec reads the annotation at runtime on 3.10
    loss: Union[float, None] = None  # noqa: UP007
    duration_s: Union[float, None] = None  # noqa: UP007


_decode_all = msgspec.json.Decoder(list[_Any]).decode


def _whole(out: dict[int, Details], lines: list[bytes], configs: bool) -> bool:
    """The file decoded in one call (C), then only its wanted records looked at; False when some
    line does not decode so (damaged, or a field of another type): then line by line."""
    try:
        records = _decode_all(b"[" + b",".join(lines) + b"]")
    except msgspec.DecodeError:
        return False
    steps: list[_Any] = []
    for line, rec in zip(lines, records, strict=True):
        event = rec.event
        if event == events.STEP_COMPLETED:
            steps.append(rec)
        elif event in _KEEP:
            _record(out, line, event, configs, None)
    _add_steps(out, ((r.rank, (r.ts, r.step or 0, r.loss, r.duration_s)) for r in steps))
    return True


def _by_line(out: dict[int, Details], data: bytes, configs: bool) -> None:
    steps: list[bytes] = []
    for match in _FIND.finditer(data):
        start = data.rfind(b"\n", 0, match.start()) + 1
        end = data.find(b"\n", match.end())
        line = data[start : end if end >= 0 else len(data)]
        event = match.group(1).decode()
        if event == events.STEP_COMPLETED:
            steps.append(line)
        else:
            _record(out, line, event, configs, None)
    _steps(out, steps, configs)


class _Step(msgspec.Struct, gc=False):
    ts: float
    rank: int
    step: int = 0
    loss: Union[float, None] = None  # noqa: UP007  # msgspec reads the annotation at runtime on 3.10
    duration_s: Union[float, None] = None  # noqa: UP007


_decode_steps = msgspec.json.Decoder(list[_Step]).decode


def _steps(out: dict[int, Details], lines: list[bytes], configs: bool) -> None:
    """The steps of a file decoded in one call (the bulk of the records read here); a batch that
    does not decode so (a field of another type) goes record by record."""
    if not lines:
        return
    try:
        decoded = _decode_steps(b"[" + b",".join(lines) + b"]")
    except msgspec.DecodeError:
        for line in lines:
            _record(out, line, events.STEP_COMPLETED, configs, None)
        return
    _add_steps(out, ((r.rank, (r.ts, r.step, r.loss, r.duration_s)) for r in decoded))


class Collect:
    """A tap on the audit (`lifecycle.audit.Tap`) for the input `source`: its details, picked from
    the records as the audit decodes them, so that the logs are decoded once. `out` ends as
    `read_details(source, configs=False)` (without line times): steps are read from the audit's
    typed records, the few other records kept are parsed from their line."""

    __slots__ = ("out", "source")
    reads: ClassVar[dict[str, tuple[str, ...]]] = {
        events.STEP_COMPLETED: ("duration_s", "loss", "step"),
        events.LIFECYCLE_STARTED: ("attempt", "host", "pid", "plan", "restart_count"),
        events.CONFIG_VALIDATED: ("fingerprint",),
        events.DISTRIBUTED_INITIALIZED: ("cp", "dp", "ep", "pp", "ranks", "tp", "vpp"),
        events.GENERATION_STARTED: ("generation",),
    }
    """The fields read on the audit's typed records (`lifecycle.audit.Tap`): what `_take` reads of
    the records kept that are neither steps nor marks (those are parsed from their line)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.out: dict[int, Details] = {}

    def __call__(self, lines: list[bytes], recs: Sequence[object]) -> None:
        out = self.out
        if not recs or not isinstance(recs[0], msgspec.Struct):  # parsed by orjson: any JSON value
            for rec in recs:
                event = rec.get("event") if type(rec) is dict else None
                if type(event) is str and event in _KEEP:
                    _put(out, rec, event, False, None)
            return
        typed = cast("Sequence[_Typed]", recs)  # a batch's records are all typed, or none is
        evs = list(map(_EVENT, typed))
        for i in compress(range(len(recs)), map(_OTHERS.__contains__, evs)):  # the few kept that are not steps
            event = evs[i]
            if event in MARKS:
                _record(out, lines[i], event, False, None)
                continue
            rec = typed[i]
            _take(_of(out, rec.rank), event, rec, False, rec.ts)
        steps = [typed[i] for i in compress(range(len(recs)), map(_STEP.__eq__, evs))]
        if steps:
            _typed_steps(out, steps)


def _typed_steps(out: dict[int, Details], steps: list[_Typed]) -> None:
    """The steps of a batch of typed records: at once (C) when they are of one rank and their fields
    of the usual types, else one by one."""
    ranks, nums, losses, times = (list(map(get, steps)) for get in _STEP_FIELDS)
    if (
        len(set(ranks)) == 1
        and set(map(type, nums)) == {int}
        and set(map(type, losses)) == {float}
        and set(map(type, times)) == {float}
    ):
        details = _of(out, ranks[0])
        room = _MAX_STEPS - len(details.steps)
        if room > 0:
            details.steps += list(zip(map(_TS, steps[:room]), nums[:room], losses[:room], times[:room], strict=True))
        return
    _add_steps(out, ((r.rank, (r.ts, _int(r.step) or 0, _num(r.loss), _num(r.duration_s))) for r in steps))


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
            _record(out, lines[lineno - 1], None, False, lineno)


def _record(out: dict[int, Details], line: bytes, event: str | None, configs: bool, lineno: int | None) -> None:
    try:
        rec = _loads(line)
    except orjson.JSONDecodeError:
        return  # a damaged record: the audit has reported it
    _put(out, rec, event, configs, lineno)


def _put(out: dict[int, Details], rec: object, event: str | None, configs: bool, lineno: int | None) -> None:
    if type(rec) is not dict:
        return
    rank, ts = rec.get("rank"), rec.get("ts")
    if type(rank) is not int or (type(ts) is not int and type(ts) is not float):
        return
    details = _of(out, rank)
    if lineno is not None:
        details.line_ts[lineno] = float(ts)
    elif event is not None:
        _take(details, event, rec, configs, float(ts))


def _take(d: Details, event: str, rec: _Record, configs: bool, ts: float) -> None:
    """Keep what record `rec` (a dict, or a typed record that has the fields of `Collect.reads`) at
    time `ts` says."""
    if event == events.STEP_COMPLETED:
        if len(d.steps) < _MAX_STEPS:
            d.steps.append((ts, _int(rec.get("step")) or 0, _num(rec.get("loss")), _num(rec.get("duration_s"))))
    elif event in MARKS:
        if len(d.marks) < _MAX_MARKS:
            d.marks.append(_mark(event, rec, ts))
    elif event == events.LIFECYCLE_STARTED:
        d.attempts.append(
            Attempt(
                ts=ts,
                attempt=_int(rec.get("attempt")) or 0,
                restart_count=_int(rec.get("restart_count")),
                host=_str(rec.get("host")),
                pid=_int(rec.get("pid")),
                plan=_str(rec.get("plan")),
            )
        )
    elif event == events.CONFIG_VALIDATED:
        config = rec.get("config") if configs else None
        d.configs.append((ts, _str(rec.get("fingerprint")), config if isinstance(config, dict) else None))
    elif event == events.DISTRIBUTED_INITIALIZED:
        ranks = rec.get("ranks")
        d.coords = {k: v for k, v in ranks.items() if type(v) is int} if isinstance(ranks, dict) else {}
        d.sizes = {k: v for k in ("tp", "pp", "cp", "ep", "dp", "vpp") if type(v := rec.get(k)) is int}
    elif event == events.GENERATION_STARTED:
        d.generations.append((ts, _int(rec.get("generation")) or 0))


def _mark(event: str, rec: _Record, ts: float) -> Mark:
    """The fields that say what happened, in one line."""
    names = (
        "target",
        "kind",
        "guard",
        "reason",
        "field",
        "error_type",
        "error",
        "peer_rank",
        "peer_state",
        "signal",
        "missing",
        "finalizer_calls",
        "trigger",
    )
    detail = ", ".join(f"{n}={str(v)[:160]}" for n in names if (v := rec.get(n)) not in (None, "", []))
    state = rec.get("state") if event != events.PEER_FAILED else rec.get("peer_state")
    return Mark(
        ts=ts,
        event=event,
        kind=MARKS[event],
        detail=detail,
        state=_str(state) or _str(rec.get("source")),
        peer=_int(rec.get("peer_rank")) if event == events.PEER_FAILED else None,
    )


def _int(value: JSONValue) -> int | None:
    return value if type(value) is int else None


def _num(value: JSONValue) -> float | None:
    return float(value) if type(value) is int or type(value) is float else None


def _str(value: JSONValue) -> str | None:
    return value if type(value) is str else None
