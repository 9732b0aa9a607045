"""What a user opens the Chrome trace for, checked event by event (each test kills mutants of
`lifecycle/export/_chrome.py` that the format checks of test_export_chrome.py let through): every
state at its own time, on the thread named for it, the failure where the rank failed, the flows of
every run, and times past what a trace can hold kept in their order."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.audit import ChainWriter
from lifecycle.cli import main

T = 1.7e9  # the run's first record; every offset below is a multiple of 1/4 s, exact in a float
FP = "f" * 64


def _export(tmp_path: Path, *logs: Path) -> list[dict[str, Any]]:
    out = tmp_path / "trace.json"
    assert main(["export", *map(str, logs), "-o", str(out)]) == 0
    return orjson.loads(out.read_bytes())["traceEvents"]  # type: ignore[no-any-return]


def _write(log_dir: Path, w: ChainWriter) -> Path:
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / f"rank-{w.base['rank']:05d}.jsonl").write_bytes(b"".join(w.lines))
    return log_dir


def _completed(w: ChainWriter, ts: float, trigger: str, source: str, dest: str, took: float) -> None:
    fields = {"trigger": trigger, "source": source, "dest": dest, "duration_s": took, "config_fingerprint": FP}
    w.emit(ts, "transition_completed", **fields)


def _dies_in_init_distributed(w: ChainWriter) -> None:
    """Imports for 6 s on their thread (VALIDATED waits 5.75 s of them), SERVICES_READY, then
    init_distributed from +6.5 s until the log stops at +6.75 s."""
    w.emit(T, "lifecycle_started", plan="training", target="CALLBACKS_BOUND", policy="raise", pid=1, host="h")
    w.emit(T, "transition_started", trigger="validate", source="CONFIGURED")
    w.emit(T + 0.25, "config_validated", fingerprint=FP, config={}, environment=True)
    imports = {"modules": {"torch": 6.0}, "failed": {}}
    w.emit(T + 6.0, "imports", started_ts=T, duration_s=6.0, waited_s=5.75, **imports)
    _completed(w, T + 6.0, "validate", "CONFIGURED", "VALIDATED", 6.0)
    w.emit(T + 6.0, "transition_started", trigger="start_services", source="VALIDATED")
    w.emit(T + 6.25, "services_ready", tokenizer="T", vocab_size=8, vocab_source="explicit")
    _completed(w, T + 6.25, "start_services", "VALIDATED", "SERVICES_READY", 0.25)
    w.emit(T + 6.5, "transition_started", trigger="init_distributed", source="SERVICES_READY")
    w.emit(T + 6.75, "side_effect", kind="process_group", trigger="init_distributed")


def _threads(trace: list[dict[str, Any]], pid: int) -> dict[int, str]:
    return {e["tid"]: e["args"]["name"] for e in trace if e["pid"] == pid and e["name"] == "thread_name"}


def test_a_chrome_trace_draws_each_state_at_its_time_on_the_thread_named_for_it(tmp_path: Path) -> None:
    w = ChainWriter("run-t", 0, 1)
    _dies_in_init_distributed(w)
    trace = _export(tmp_path, _write(tmp_path / "logs", w))
    threads = _threads(trace, 1)
    slices = {e["name"]: (threads[e["tid"]], e["cat"], e["ts"], e["dur"]) for e in trace if e["ph"] == "X"}
    assert slices == {
        "imports": ("imports", "import", 0, 6_000_000),
        "VALIDATED": ("states", "state", 5_750_000, 250_000),
        "SERVICES_READY": ("states", "state", 6_000_000, 250_000),
        "init_distributed (not completed)": ("states", "state", 6_500_000, 250_000),
    }
    [stopped] = [e["args"] for e in trace if e["name"] == "init_distributed (not completed)"]
    assert stopped == {"trigger": "init_distributed", "completed": False}
    [died] = [e for e in trace if e["ph"] == "i" and e["cat"] == "failure"]
    assert (threads[died["tid"]], died["name"], died["ts"]) == ("records", "startup died", 6_750_000)
    assert died["args"]["state"] == "SERVICES_READY" and "init_distributed" in died["args"]["message"]


def _peer_failed(w: ChainWriter, at: float, peer: int) -> None:
    w.emit(T, "lifecycle_started", plan="training", target="CALLBACKS_BOUND", policy="raise", pid=1, host="h")
    w.emit(T, "transition_started", trigger="validate", source="CONFIGURED")
    w.emit(at, "peer_failed", peer_rank=peer, peer_state="VALIDATED", error="RuntimeError: gone")


def _quiet(w: ChainWriter) -> None:
    """A rank whose log shows no failure: it validated and shut down."""
    w.emit(T, "lifecycle_started", plan="training", target="CALLBACKS_BOUND", policy="raise", pid=2, host="h")
    w.emit(T, "transition_started", trigger="validate", source="CONFIGURED")
    w.emit(T + 0.25, "config_validated", fingerprint=FP, config={}, environment=True)
    _completed(w, T + 0.25, "validate", "CONFIGURED", "VALIDATED", 0.25)
    w.emit(T + 0.5, "lifecycle_shutdown", source="VALIDATED")
    _completed(w, T + 0.5, "shutdown", "VALIDATED", "SHUT_DOWN", 0.0)


def test_a_peer_named_as_the_root_cause_whose_own_log_shows_no_failure_draws_no_flow(tmp_path: Path) -> None:
    witness, named = ChainWriter("run-p", 0, 2), ChainWriter("run-p", 1, 2)
    _peer_failed(witness, T + 1.0, peer=1)
    _quiet(named)
    for w in (witness, named):
        _write(tmp_path / "logs", w)
    out = tmp_path / "trace.json"
    assert main(["export", str(tmp_path / "logs"), "-o", str(out)]) == 0
    doc = orjson.loads(out.read_bytes())
    assert [(c["rank"], c["kind"]) for c in doc["otherData"]["root_causes"]] == [(1, "peer")]
    assert not [e for e in doc["traceEvents"] if e["ph"] in ("s", "f")]
    assert ("peer_failed", "failure") in {(e["name"], e["cat"]) for e in doc["traceEvents"] if e["ph"] == "i"}


def test_the_flows_of_a_failed_run_are_drawn_after_a_run_that_has_none(tmp_path: Path) -> None:
    """Two runs in one trace: the first's cause has no failure to start a flow from; the second's
    rank 0 dies and rank 1 is stopped by it: its flow is still drawn."""
    witness, named = ChainWriter("run-a", 0, 2), ChainWriter("run-a", 1, 2)
    _peer_failed(witness, T + 1.0, peer=1)
    _quiet(named)
    for w in (witness, named):
        _write(tmp_path / "a", w)
    cause, victim = ChainWriter("run-b", 0, 2), ChainWriter("run-b", 1, 2)
    _dies_in_init_distributed(cause)
    _peer_failed(victim, T + 7.0, peer=0)
    for w in (cause, victim):
        _write(tmp_path / "b", w)
    trace = _export(tmp_path, tmp_path / "a", tmp_path / "b")
    flows = sorted((e["ph"], e["pid"] - 1, e["ts"], e["name"]) for e in trace if e["ph"] in ("s", "f"))
    assert flows == [("f", 1, 7_000_000, "rank 0 -> rank 1"), ("s", 0, 6_750_000, "rank 0 -> rank 1")]


def test_times_past_what_a_trace_holds_are_written_and_keep_their_order(tmp_path: Path) -> None:
    """Steps stamped far before the first record and far after it (a clock never set, LA022): the
    trace is still written, and each step's counter is where its time puts it among the others."""
    w = ChainWriter("run-c", 0, 1)
    w.emit(T, "lifecycle_started", plan="training", target="CALLBACKS_BOUND", policy="raise", pid=1, host="h")
    for step, ts in enumerate((-1e300, T + 0.25, 1e300, T + 0.5), 1):
        w.emit(ts, "step_completed", step=step, loss=1.0, duration_s=0.25)
    trace = _export(tmp_path, _write(tmp_path / "logs", w))
    at = {e["args"]["step"]: e["ts"] for e in trace if e["ph"] == "C"}
    assert at[1] < 0 < at[2] == 250_000 < at[4] == 500_000 < at[3]
    assert at[1] >= -(2**63) and at[3] < 2**63  # what a 64-bit integer holds: every reader's ts


def test_a_victim_that_logged_its_failure_before_the_causes_record_gets_a_flow_that_never_points_back(
    tmp_path: Path,
) -> None:
    """Rank 1 logs rank 0's failure at +6.5 s, a quarter second before rank 0's own last record (its
    clock behind, or rank 0's record late): the arrow ends where it starts, not before it."""
    cause, victim = ChainWriter("run-v", 0, 2), ChainWriter("run-v", 1, 2)
    _dies_in_init_distributed(cause)
    _peer_failed(victim, T + 6.5, peer=0)
    for w in (cause, victim):
        _write(tmp_path / "logs", w)
    trace = _export(tmp_path, tmp_path / "logs")
    flows = sorted((e["ph"], e["pid"] - 1, e["ts"], e["name"]) for e in trace if e["ph"] in ("s", "f"))
    assert flows == [("f", 1, 6_750_000, "rank 0 -> rank 1"), ("s", 0, 6_750_000, "rank 0 -> rank 1")]
    failed = {e["ts"] for e in trace if e["ph"] == "i" and e["pid"] == 2 and e["cat"] == "failure"}
    assert failed == {6_500_000}, "the victim's own failure stays at its time"
