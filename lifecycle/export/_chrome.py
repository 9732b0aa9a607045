"""Chrome Trace Event JSON (the format Perfetto UI and chrome://tracing open), optionally gzipped.

One process per rank (`pid` = rank + 1: pid 0 is reserved by some viewers), named with its
coordinates and sorted by rank; thread 1 holds the states, thread 2 the imports (they run on a
thread beside VALIDATED, so they overlap it). Times are whole microseconds since the run's first record.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson

from lifecycle.audit import no_gc
from lifecycle.export._model import RankTrace, Trace
from lifecycle.log import events

STATES_TID, IMPORTS_TID, MARKS_TID = 1, 2, 3
FLOW_CATEGORY = "root_cause"


def chrome_events(trace: Trace) -> list[dict[str, Any]]:
    """The trace's events, in the order they are written."""
    out: list[dict[str, Any]] = []
    for rank in trace.ranks:
        out += _rank_events(rank, trace.t0)
    out += _flows(trace)
    return out


def chrome_document(trace: Trace) -> dict[str, Any]:
    """The JSON Object Format: `traceEvents` plus what the viewers show as metadata."""
    result = trace.result
    return {
        "traceEvents": chrome_events(trace),
        "displayTimeUnit": "ms",
        "otherData": {
            "producer": "megatron-lifecycle",
            "run_ids": list(trace.run_ids),
            "t0_unix_s": trace.t0,
            "world_size": trace.world_size,
            "ranks": len(trace.ranks),
            "findings": len(result.findings),
            "root_causes": [{"rank": c.rank, "kind": c.kind, "message": c.message} for c in trace.root_causes],
        },
    }


def write_chrome(trace: Trace, output: str | Path) -> Path:
    """Write the trace to `output`; a `.gz` suffix gzips it."""
    path = Path(output)
    with no_gc():
        data = orjson.dumps(chrome_document(trace))
    if path.suffix == ".gz":
        data = gzip.compress(data, compresslevel=6, mtime=0)
    path.write_bytes(data)
    return path


def _us(ts: float, t0: float) -> int:
    return round((ts - t0) * 1e6)


def _rank_events(rank: RankTrace, t0: float) -> list[dict[str, Any]]:
    pid = rank.rank + 1
    out: list[dict[str, Any]] = [
        {"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": rank.label}},
        {"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": rank.rank}},
        {"ph": "M", "pid": pid, "tid": STATES_TID, "name": "thread_name", "args": {"name": "states"}},
        {"ph": "M", "pid": pid, "tid": IMPORTS_TID, "name": "thread_name", "args": {"name": "imports"}},
        {"ph": "M", "pid": pid, "tid": MARKS_TID, "name": "thread_name", "args": {"name": "records"}},
    ]
    for seg, attempt in rank.segments:
        args: dict[str, Any] = {"trigger": seg.trigger, "generation": seg.generation, "attempt": attempt}
        args.update({f"{k}": v for k, v in rank.counts.get(seg.state, {}).items()})
        out.append(
            {
                "ph": "X",
                "pid": pid,
                "tid": IMPORTS_TID if seg.state == events.IMPORTS else STATES_TID,
                "name": seg.state,
                "cat": "import" if seg.state == events.IMPORTS else "state",
                "ts": _us(seg.start, t0),
                "dur": round(seg.duration * 1e6),
                "args": args,
            }
        )
    if rank.unfinished is not None:
        trigger, start, end = rank.unfinished
        out.append(
            {
                "ph": "X",
                "pid": pid,
                "tid": STATES_TID,
                "name": f"{trigger} (not completed)",
                "cat": "state",
                "ts": _us(start, t0),
                "dur": round(max(0.0, end - start) * 1e6),
                "args": {"trigger": trigger, "completed": False},
            }
        )
    failure = rank.audit.failure
    if failure is not None and failure.ts is not None:
        out.append(
            {
                "ph": "i",
                "s": "t",
                "pid": pid,
                "tid": MARKS_TID,
                "name": f"startup {failure.kind}",
                "cat": "failure",
                "ts": _us(failure.ts, t0),
                "args": {"message": failure.message, "state": failure.state},
            }
        )
    for mark in rank.marks:
        out.append(
            {
                "ph": "i",
                "s": "t",
                "pid": pid,
                "tid": MARKS_TID,
                "name": mark.event,
                "cat": mark.kind,
                "ts": _us(mark.ts, t0),
                "args": {"detail": mark.detail, "state": mark.state, "rule": mark.rule, "peer_rank": mark.peer},
            }
        )
    before = len(out)
    out += [
        {
            "ph": "C",
            "pid": pid,
            "tid": 0,
            "name": "step",
            "ts": round((ts - t0) * 1e6),
            "args": {"loss": loss, "step_time_s": duration, "step": step},
        }
        for ts, step, loss, duration in rank.steps
        if loss is not None and duration is not None
    ]
    if len(out) - before < len(rank.steps):  # a step with one of the two: a counter of that one
        for ts, step, loss, duration in rank.steps:
            if (loss is None) != (duration is None):
                values = {"loss": loss} if duration is None else {"step_time_s": duration}
                out.append(
                    {
                        "ph": "C",
                        "pid": pid,
                        "tid": 0,
                        "name": "step",
                        "ts": _us(ts, t0),
                        "args": values | {"step": step},
                    }
                )
    return out


def _flows(trace: Trace) -> list[dict[str, Any]]:
    """A flow from the root-cause rank's failure to each victim's: `s` on the cause, `f` (bound to
    the enclosing slice, `bp: e`) on the victim, one id per victim."""
    by_rank = {(r.audit.run_id, r.rank): r for r in trace.ranks}
    out: list[dict[str, Any]] = []
    flow_id = 0
    for cause in trace.root_causes:
        source = by_rank.get((cause.run_id, cause.rank)) if cause.rank is not None else None
        if source is None or source.audit.failure is None or source.audit.failure.ts is None:
            continue
        start = _us(source.audit.failure.ts, trace.t0)
        for victim in cause.victims:
            target = by_rank.get((cause.run_id, victim.rank))
            if target is None or target.audit.failure is None or target.audit.failure.ts is None:
                continue
            flow_id += 1
            name = f"rank {cause.rank} -> rank {victim.rank}"
            out.append(
                {
                    "ph": "s",
                    "id": flow_id,
                    "pid": source.rank + 1,
                    "tid": MARKS_TID,
                    "cat": FLOW_CATEGORY,
                    "name": name,
                    "ts": start,
                }
            )
            out.append(
                {
                    "ph": "f",
                    "bp": "e",
                    "id": flow_id,
                    "pid": target.rank + 1,
                    "tid": MARKS_TID,
                    "cat": FLOW_CATEGORY,
                    "name": name,
                    "ts": max(start, _us(target.audit.failure.ts, trace.t0)),
                }
            )
    return out
