"""The Chrome trace validates against the Trace Event Format (required fields per phase, flows
matched by id) and says what a user opens it for: ranks as named processes, states as slices,
the root cause's flows to its victims, step counters."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson
import pytest

from lifecycle.cli import main
from lifecycle.export import load

# The Trace Event Format (docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):
# fields every event of a phase must have.
REQUIRED = {
    "X": {"name", "ph", "ts", "dur", "pid", "tid"},
    "i": {"name", "ph", "ts", "pid", "tid", "s"},
    "C": {"name", "ph", "ts", "pid", "args"},
    "M": {"name", "ph", "pid", "args"},
    "s": {"name", "ph", "ts", "pid", "tid", "id", "cat"},
    "f": {"name", "ph", "ts", "pid", "tid", "id", "cat"},
}
METADATA = {"process_name": "name", "process_sort_index": "sort_index", "thread_name": "name"}


def export(tmp_path: Path, logs: Path, name: str = "trace.json") -> dict[str, Any]:
    out = tmp_path / name
    assert main(["export", str(logs), "-o", str(out)]) == 0
    data = out.read_bytes()
    return orjson.loads(gzip.decompress(data) if name.endswith(".gz") else data)  # type: ignore[no-any-return]


def validate(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Check every event against the format; returns the events."""
    trace = doc["traceEvents"]
    assert isinstance(trace, list) and trace
    for event in trace:
        ph = event["ph"]
        assert ph in REQUIRED, f"unexpected phase {ph!r}"
        missing = REQUIRED[ph] - event.keys()
        assert not missing, f"{ph} event lacks {missing}: {event}"
        assert isinstance(event["pid"], int) and isinstance(event.get("tid", 0), int)
        if "ts" in event:
            assert isinstance(event["ts"], (int, float)) and event["ts"] >= 0
        if ph == "X":
            assert event["dur"] >= 0
        if ph == "i":
            assert event["s"] in ("g", "p", "t")
        if ph == "C":
            assert all(isinstance(v, (int, float)) for v in event["args"].values())
        if ph == "M":
            assert event["name"] in METADATA and METADATA[event["name"]] in event["args"]
    _flows_matched(trace)
    return trace  # type: ignore[no-any-return]


def _flows_matched(trace: list[dict[str, Any]]) -> None:
    """Each flow id has one start and one finish, same name and category, the finish not before the
    start; each end lies on a thread that has an event at that time for it to bind to."""
    starts = {e["id"]: e for e in trace if e["ph"] == "s"}
    finishes = {e["id"]: e for e in trace if e["ph"] == "f"}
    assert len(starts) == sum(e["ph"] == "s" for e in trace) and len(finishes) == sum(e["ph"] == "f" for e in trace)
    assert starts.keys() == finishes.keys()
    anchors = {(e["pid"], e["tid"], e["ts"]) for e in trace if e["ph"] in ("i", "X")}
    for flow_id, start in starts.items():
        finish = finishes[flow_id]
        assert (start["name"], start["cat"]) == (finish["name"], finish["cat"])
        assert finish["ts"] >= start["ts"] and finish.get("bp") == "e"
        assert (start["pid"], start["tid"], start["ts"]) in anchors
        assert (finish["pid"], finish["tid"], finish["ts"]) in anchors


def test_a_clean_run_has_a_named_process_per_rank_and_a_slice_per_state(tmp_path: Path, clean_logs: Path) -> None:
    trace = validate(export(tmp_path, clean_logs))
    names = {e["pid"]: e["args"]["name"] for e in trace if e["name"] == "process_name"}
    order = {e["pid"]: e["args"]["sort_index"] for e in trace if e["name"] == "process_sort_index"}
    assert sorted(names.values()) == ["rank 0", "rank 1"] and order == {1: 0, 2: 1}
    states = {(e["pid"], e["name"]) for e in trace if e["ph"] == "X"}
    for pid in (1, 2):
        assert {
            (pid, s)
            for s in ("VALIDATED", "SERVICES_READY", "DISTRIBUTED", "MODEL_BUILT", "CALLBACKS_BOUND", "SHUT_DOWN")
        } <= states
    steps = [e for e in trace if e["ph"] == "C" and e["pid"] == 1]
    assert [(e["args"]["step"], e["args"]["loss"]) for e in steps] == [(1, 1.0), (2, 0.5)]
    assert not [e for e in trace if e["ph"] in "sf"]


def test_a_failed_run_draws_flows_from_the_root_cause_to_each_victim(tmp_path: Path, failed_logs: Path) -> None:
    doc = export(tmp_path, failed_logs, "trace.json.gz")
    trace = validate(doc)
    flows = sorted((e["pid"] - 1, e["name"]) for e in trace if e["ph"] == "f")
    assert flows == [(0, "rank 2 -> rank 0"), (1, "rank 2 -> rank 1"), (3, "rank 2 -> rank 3")]
    assert {e["pid"] for e in trace if e["ph"] == "s"} == {3}
    assert doc["otherData"]["root_causes"][0]["rank"] == 2
    instants = {(e["pid"] - 1, e["name"], e["cat"]) for e in trace if e["ph"] == "i"}
    assert {
        (0, "tripwire_violation", "violation"),
        (0, "peer_failed", "failure"),
        (2, "transition_failed", "failure"),
        (3, "state_timeout", "failure"),
        (0, "LA012", "finding"),
    } <= instants
    unfinished = [e for e in trace if e["ph"] == "X" and e["name"] == "init_distributed (not completed)"]
    assert {e["pid"] - 1 for e in unfinished} == {0, 1, 2, 3}


def test_coordinates_name_the_process(tmp_path: Path) -> None:
    from export_logs import clean_events, clock, write_events

    ev = clean_events()
    for i, (event, fields) in enumerate(ev):
        if event == "distributed_initialized":
            ev[i] = (event, {**fields, "ranks": {"tp": 1, "pp": 0, "cp": 0, "ep": 0, "dp": 4}})
    with clock(100.0 + i for i in range(len(ev))):
        write_events(tmp_path, ev, rank=17, world=32, run_id="r")
    [rank] = load([str(tmp_path)]).ranks
    assert rank.label == "rank 17 (tp 1, pp 0, dp 4)"


def test_unreadable_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(tmp_path / "nope"), "-o", str(tmp_path / "t.json")]) == 2
    assert main(["export", "-", "-o", str(tmp_path / "t.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "no such file or directory" in err[0] and "stdin" in err[1]
    assert not (tmp_path / "t.json").exists()


def _steps_after_bound(tmp_path: Path, loss: object) -> Path:
    """The clean log with two steps once CALLBACKS_BOUND, the second's loss `loss`; its file."""
    from export_logs import clean_events, clock, write_events

    ev = clean_events()
    steps = [
        ("step_completed", {"step": 1, "loss": 2.5, "duration_s": 0.1}),
        ("step_completed", {"step": 2, "loss": loss, "duration_s": 0.2}),
    ]
    at = next(i for i, (e, f) in enumerate(ev) if e == "transition_completed" and f.get("dest") == "CALLBACKS_BOUND")
    ev[at + 1 : at + 1] = steps
    with clock(100.0 + i for i in range(len(ev))):
        write_events(tmp_path / "logs", ev)
    return tmp_path / "logs" / "rank-00000.jsonl"


def test_a_step_without_a_loss_is_a_counter_of_its_number_and_time(tmp_path: Path) -> None:
    _steps_after_bound(tmp_path, None)
    trace = validate(export(tmp_path, tmp_path / "logs"))
    counters = [e["args"] for e in trace if e["ph"] == "C"]
    assert {"loss": 2.5, "step_time_s": 0.1, "step": 1} in counters
    assert {"step_time_s": 0.2, "step": 2} in counters


@pytest.mark.parametrize(("command", "name"), [("export", "trace.json"), ("report", "report.html")])
def test_a_step_whose_loss_is_not_a_number_is_one_line_naming_its_line_event_and_field_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, name: str
) -> None:
    log = _steps_after_bound(tmp_path, "inf?")
    line = next(n for n, text in enumerate(log.read_bytes().splitlines(), 1) if b'"inf?"' in text)
    assert main([command, str(tmp_path / "logs"), "-o", str(tmp_path / name)]) == 2
    out = capsys.readouterr()
    assert out.err.splitlines() == [
        f"lifecycle {command}: {log}:{line}: step_completed: field 'loss' is 'inf?', expected float | None."
    ]
    assert not (tmp_path / name).exists()
