"""Chrome Trace Event JSON (the format Perfetto UI and chrome://tracing open), optionally gzipped.

One process per rank (`pid` = rank + 1: pid 0 is reserved by some viewers), named with its
coordinates and sorted by rank; thread 1 holds the states, thread 2 the imports (they run on a
thread beside VALIDATED, so they overlap it). Times are whole microseconds since the run's first record.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, TypedDict

import orjson

from lifecycle.audit import Failure, Segment, no_gc, write_output
from lifecycle.export._details import Mark
from lifecycle.export._model import RankTrace, Trace
from lifecycle.log import JSONValue, events

STATES_TID, IMPORTS_TID, MARKS_TID = 1, 2, 3
FLOW_CATEGORY = "root_cause"


_PRODUCER = b'"producer":"megatron-lifecycle"'
_HEAD = b'{"otherData":{' + _PRODUCER


def ours(head: bytes) -> bool:
    """A Chrome trace we wrote (its sample, gunzipped when gzipped): the only file `write_chrome`
    replaces. Ours starts with the producer; another program's trace that starts as ours did before
    (`{"traceEvents":`) is ours only where the sample shows our producer (its tail, uncompressed)."""
    return head.startswith(_HEAD) or (head.startswith(b'{"traceEvents":') and _PRODUCER in head)


class Metadata(TypedDict):
    """`M`: a process's or thread's name, or the process's place in the list."""

    ph: Literal["M"]
    pid: int
    tid: int
    name: str
    args: dict[str, JSONValue]


class Slice(TypedDict):
    """`X`: a complete slice (a state's entry work, the imports, an unfinished transition)."""

    ph: Literal["X"]
    pid: int
    tid: int
    name: str
    cat: str
    ts: int
    dur: int
    args: dict[str, JSONValue]


class Instant(TypedDict):
    """`i` on its thread (`s: t`): a failure, a violation, a record a finding points at."""

    ph: Literal["i"]
    s: Literal["t"]
    pid: int
    tid: int
    name: str
    cat: str
    ts: int
    args: dict[str, JSONValue]


class Counter(TypedDict):
    """`C`: the `step` counter's values at a step."""

    ph: Literal["C"]
    pid: int
    tid: int
    name: str
    ts: int
    args: dict[str, JSONValue]


class _Flow(TypedDict):
    """What a flow's two ends share: the flow's id, where it is drawn, and when."""

    id: int
    pid: int
    tid: int
    cat: str
    name: str
    ts: int


class FlowStart(_Flow):
    """`s`: a flow's start, on the root cause."""

    ph: Literal["s"]


class FlowEnd(_Flow):
    """`f`: a flow's end on a victim, bound to the enclosing slice (`bp: e`)."""

    ph: Literal["f"]
    bp: Literal["e"]


Event = Metadata | Slice | Instant | Counter | FlowStart | FlowEnd
"""A Chrome Trace Event, as written (its keys in this order)."""


class Document(TypedDict):
    """The JSON Object Format, its keys in the order written."""

    otherData: dict[str, JSONValue]
    traceEvents: list[Event]
    displayTimeUnit: str


def chrome_events(trace: Trace) -> list[Event]:
    """The trace's events, in the order they are written."""
    out: list[Event] = []
    for rank in trace.ranks:
        out += _rank_events(rank, trace.t0)
    out += _flows(trace)
    return out


def chrome_document(trace: Trace) -> Document:
    """The JSON Object Format: what the viewers show as metadata (first: it names us, `ours`), then
    `traceEvents`."""
    result = trace.result
    return {
        "otherData": {
            "producer": "megatron-lifecycle",
            "run_ids": list(trace.run_ids),
            "t0_unix_s": trace.t0,
            "world_size": trace.world_size,
            "ranks": len(trace.ranks),
            "findings": len(result.findings),
            "root_causes": [{"rank": c.rank, "kind": c.kind, "message": c.message} for c in trace.root_causes],
        },
        "traceEvents": chrome_events(trace),
        "displayTimeUnit": "ms",
    }


def write_chrome(trace: Trace, output: str | Path) -> Path:
    """Write the trace to `output` (`write_output`: whole or not at all, and only over a trace we
    wrote); a `.gz` suffix gzips it."""
    path = Path(output)
    with no_gc():
        data = orjson.dumps(chrome_document(trace))
    if path.suffix == ".gz":
        data = gzip.compress(data, compresslevel=6, mtime=0)
    return write_output(path, data, ours=ours)


_INT64 = (1 << 63) - 1


def micros(seconds: float) -> int:
    """Whole microseconds, held to what a 64-bit integer holds: an impossible timestamp (LA022)
    gives a trace with a useless time, never one orjson cannot write."""
    us = seconds * 1e6
    if us != us:  # NaN: an infinite time minus an infinite t0
        return 0
    return _INT64 if us >= _INT64 else -_INT64 if us <= -_INT64 else round(us)


def _us(ts: float, t0: float) -> int:
    return micros(ts - t0)


def _rank_events(rank: RankTrace, t0: float) -> list[Event]:
    pid = rank.rank + 1
    out = _names(rank, pid)
    out += [_segment(rank, seg, attempt, pid, t0) for seg, attempt in rank.segments]
    if rank.unfinished is not None:
        out.append(_unfinished(rank.unfinished, pid, t0))
    failure = rank.audit.failure
    if failure is not None and failure.ts is not None:
        out.append(_failure(failure, failure.ts, pid, t0))
    out += [_mark(mark, pid, t0) for mark in rank.marks]
    out += _step_counters(rank, pid, t0)
    return out


_THREADS = ((STATES_TID, "states"), (IMPORTS_TID, "imports"), (MARKS_TID, "records"))


def _names(rank: RankTrace, pid: int) -> list[Event]:
    """The metadata events: the process's name and place in the list, and its threads' names."""
    return [
        {"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": rank.label}},
        {"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": rank.rank}},
        *(Metadata(ph="M", pid=pid, tid=tid, name="thread_name", args={"name": name}) for tid, name in _THREADS),
    ]


def _segment(rank: RankTrace, seg: Segment, attempt: int, pid: int, t0: float) -> Slice:
    """A state (or the imports, on their own thread) as a complete slice, with the rank's counts in it."""
    args: dict[str, JSONValue] = {"trigger": seg.trigger, "generation": seg.generation, "attempt": attempt}
    args.update({f"{k}": v for k, v in rank.counts.get(seg.state, {}).items()})
    imports = seg.state == events.IMPORTS
    return {
        "ph": "X",
        "pid": pid,
        "tid": IMPORTS_TID if imports else STATES_TID,
        "name": seg.state,
        "cat": "import" if imports else "state",
        "ts": _us(seg.start, t0),
        "dur": micros(seg.duration),
        "args": args,
    }


def _unfinished(unfinished: tuple[str, float, float], pid: int, t0: float) -> Slice:
    """The transition that never completed, as a slice up to where the log ends."""
    trigger, start, end = unfinished
    return {
        "ph": "X",
        "pid": pid,
        "tid": STATES_TID,
        "name": f"{trigger} (not completed)",
        "cat": "state",
        "ts": _us(start, t0),
        "dur": micros(max(0.0, end - start)),
        "args": {"trigger": trigger, "completed": False},
    }


def _instant(pid: int, name: str, cat: str, ts: int, args: dict[str, JSONValue]) -> Instant:
    """An instant on the records thread (a failure, a violation, a record a finding points at)."""
    return {"ph": "i", "s": "t", "pid": pid, "tid": MARKS_TID, "name": name, "cat": cat, "ts": ts, "args": args}


def _failure(failure: Failure, ts: float, pid: int, t0: float) -> Instant:
    """The rank's startup failure (at `ts`, its time), as an instant."""
    args: dict[str, JSONValue] = {"message": failure.message, "state": failure.state}
    return _instant(pid, f"startup {failure.kind}", "failure", _us(ts, t0), args)


def _mark(mark: Mark, pid: int, t0: float) -> Instant:
    args: dict[str, JSONValue] = {"detail": mark.detail, "state": mark.state, "rule": mark.rule, "peer_rank": mark.peer}
    return _instant(pid, mark.event, mark.kind, _us(mark.ts, t0), args)


def _step_counters(rank: RankTrace, pid: int, t0: float) -> list[Counter]:
    """A `step` counter per step: its loss and time where it has both (first, in step order), then a
    counter of the one it has for a step that has one of the two."""
    out = [
        _counter(pid, _us(ts, t0), {"loss": loss, "step_time_s": duration, "step": step})
        for ts, step, loss, duration in rank.steps
        if loss is not None and duration is not None
    ]
    if len(out) < len(rank.steps):
        for ts, step, loss, duration in rank.steps:
            if (loss is None) != (duration is None):
                values: dict[str, JSONValue] = {"loss": loss} if duration is None else {"step_time_s": duration}
                out.append(_counter(pid, _us(ts, t0), values | {"step": step}))
    return out


def _counter(pid: int, ts: int, args: dict[str, JSONValue]) -> Counter:
    return {"ph": "C", "pid": pid, "tid": 0, "name": "step", "ts": ts, "args": args}


def _flows(trace: Trace) -> list[FlowStart | FlowEnd]:
    """A flow from the root-cause rank's failure to each victim's, one id per victim."""
    out: list[FlowStart | FlowEnd] = []
    for flow_id, (name, source, target) in enumerate(_blamed(trace), 1):
        out += _flow(flow_id, name, source, target)
    return out


def _blamed(trace: Trace) -> Iterator[tuple[str, tuple[int, int], tuple[int, int]]]:
    """Each (root cause, victim) of which both failures have a time: its name, and the (pid, ts) of
    the cause's failure and of the victim's (never before the cause's)."""
    by_rank = {(r.audit.run_id, r.rank): r for r in trace.ranks}
    for cause in trace.root_causes:
        source = by_rank.get((cause.run_id, cause.rank)) if cause.rank is not None else None
        start = _failed_at(source, trace.t0)
        if source is None or start is None:
            continue
        for victim in cause.victims:
            target = by_rank.get((cause.run_id, victim.rank))
            end = _failed_at(target, trace.t0)
            if target is not None and end is not None:
                name = f"rank {cause.rank} -> rank {victim.rank}"
                yield name, (source.rank + 1, start), (target.rank + 1, max(start, end))


def _failed_at(rank: RankTrace | None, t0: float) -> int | None:
    """When the rank's startup failed, or None (no such rank, or no failure with a time)."""
    failure = None if rank is None else rank.audit.failure
    return None if failure is None or failure.ts is None else _us(failure.ts, t0)


def _flow(flow_id: int, name: str, source: tuple[int, int], target: tuple[int, int]) -> list[FlowStart | FlowEnd]:
    """The two ends of a flow, each at (pid, ts): `s` on the cause, `f` (bound to the enclosing
    slice, `bp: e`) on the victim."""
    (source_pid, start), (target_pid, end) = source, target
    return [
        {
            "ph": "s",
            "id": flow_id,
            "pid": source_pid,
            "tid": MARKS_TID,
            "cat": FLOW_CATEGORY,
            "name": name,
            "ts": start,
        },
        {
            "ph": "f",
            "bp": "e",
            "id": flow_id,
            "pid": target_pid,
            "tid": MARKS_TID,
            "cat": FLOW_CATEGORY,
            "name": name,
            "ts": end,
        },
    ]
