"""What the export keeps of each log and the trace it makes of them (each test kills mutants of
`lifecycle/export/_details.py` and `_model.py` that the other export tests let through): the
restart cycles and what changed between them, the marks of failures and findings on the first
rank's log and the others', a damaged log read line by line, `load` by name and its refusals."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.audit import ChainWriter
from lifecycle.errors import LogUnreadable
from lifecycle.export import load
from lifecycle.testing import read_details

T = 1.7e9
FP_A, FP_B = "a" * 64, "b" * 64


def _write(log_dir: Path, *writers: ChainWriter, damaged_first: bool = False, no_last_newline: bool = False) -> Path:
    log_dir.mkdir(parents=True, exist_ok=True)
    for w in writers:
        data = (b"{damaged\n" if damaged_first else b"") + b"".join(w.lines)
        (log_dir / f"rank-{w.base['rank']:05d}.jsonl").write_bytes(data[:-1] if no_last_newline else data)
    return log_dir


def _cycle(w: ChainWriter, t: float, attempt: int, host: str, fingerprint: str) -> None:
    """One process's start on this rank: lifecycle_started, then VALIDATED with `fingerprint`."""
    w.emit(
        t, "lifecycle_started", plan="training", target="CALLBACKS_BOUND", policy="raise", attempt=attempt, host=host
    )
    w.emit(t + 0.25, "transition_started", trigger="validate", source="CONFIGURED")
    w.emit(t + 0.5, "config_validated", fingerprint=fingerprint, config={"train": {"seed": attempt}})
    done = {"trigger": "validate", "source": "CONFIGURED", "dest": "VALIDATED", "duration_s": 0.25}
    w.emit(t + 0.5, "transition_completed", config_fingerprint=fingerprint, **done)


def test_each_restart_cycle_says_its_ranks_hosts_failures_and_what_changed(tmp_path: Path) -> None:
    """Ten ranks start cycle 0 on two hosts, rank 1 fails and the others' logs stop (failed too);
    cycle 1 has rank 0 alone, on one host, with another config."""
    writers = [ChainWriter("run-c", r, 10) for r in range(10)]
    for r, w in enumerate(writers):
        _cycle(w, T, 0, f"node{r % 2}", FP_A)
    writers[1].emit(T + 1, "peer_failed", peer_rank=9, peer_state="VALIDATED", error="RuntimeError: gone")
    _cycle(writers[0], T + 10, 1, "node0", FP_B)
    first, second = load([str(_write(tmp_path / "logs", *writers))]).cycles
    assert (first.attempt, first.start, first.ranks, first.hosts, first.failed) == (0, T, 10, 2, tuple(range(1, 10)))
    assert first.fingerprints == (FP_A,) and first.changes == ()
    assert (second.attempt, second.start, second.ranks, second.hosts, second.failed) == (1, T + 10, 1, 1, (0,))
    assert second.fingerprints == (FP_B,)
    assert second.changes == (
        "ranks: 10 -> 1, missing 1,2,3,4,5,6,7,8…",
        "hosts: 2 -> 1",
        f"config fingerprint: {FP_A[:12]} -> {FP_B[:12]}",
        "train.seed: 0 -> 1",
    )


def test_a_rank_that_fails_in_its_second_cycle_failed_in_that_cycle_only(tmp_path: Path) -> None:
    w = ChainWriter("run-c", 0, 1)
    _cycle(w, T, 0, "node0", FP_A)
    _cycle(w, T + 10, 1, "node0", FP_A)
    w.emit(T + 11, "peer_failed", peer_rank=1, peer_state="VALIDATED", error="RuntimeError: gone")
    first, second = load([str(_write(tmp_path / "logs", w))]).cycles
    assert (first.failed, second.failed) == ((), (0,))
    assert second.changes == ("train.seed: 0 -> 1",)  # the same ranks, hosts and fingerprint


def test_a_config_validated_at_the_instant_its_cycle_starts_belongs_to_that_cycle(tmp_path: Path) -> None:
    w = ChainWriter("run-c", 0, 1)
    _cycle(w, T, 0, "node0", FP_A)
    w.emit(
        T + 10, "lifecycle_started", plan="training", target="CALLBACKS_BOUND", policy="raise", attempt=1, host="node0"
    )
    w.emit(T + 10, "config_validated", fingerprint=FP_B, config={"train": {"seed": 1}})
    first, second = load([str(_write(tmp_path / "logs", w))]).cycles
    assert (first.fingerprints, second.fingerprints) == ((FP_A,), (FP_B,))
    assert second.changes == (f"config fingerprint: {FP_A[:12]} -> {FP_B[:12]}", "train.seed: 0 -> 1")


def test_a_log_continued_from_an_earlier_file_is_one_cycle_from_its_first_record(tmp_path: Path) -> None:
    w = ChainWriter("run-c", 0, 1)
    _cycle(w, T, 3, "node0", FP_A)
    w.lines = w.lines[1:]  # its lifecycle_started is in the earlier file
    trace = load([str(_write(tmp_path / "logs", w))])
    (cycle,) = trace.cycles
    assert (cycle.attempt, cycle.start, cycle.ranks, cycle.hosts) == (0, T + 0.25, 1, 0)
    (rank,) = trace.ranks
    assert [(seg.trigger, attempt) for seg, attempt in rank.segments] == [("validate", 0)]  # drawn in cycle 0


def test_marks_name_the_state_a_failure_happened_in_and_a_peer_failure_the_peer(tmp_path: Path) -> None:
    """Rank 0's log is read again whole (for its configs), rank 1's by the audit's tap: both keep
    the same marks, and the coordinates and violations that come before the config."""
    writers = [ChainWriter("run-m", r, 2) for r in range(2)]
    for w in writers:
        w.emit(T, "lifecycle_started", plan="training", target="CALLBACKS_BOUND", policy="raise")
        w.emit(T + 0.25, "transition_started", trigger="validate", source="CONFIGURED")
        trip = {"target": "torch.manual_seed", "kind": "rng", "owner": "init_distributed", "policy": "warn"}
        w.emit(T + 0.3, "tripwire_violation", state="CONFIGURED", trigger="validate", **trip)
        w.emit(T + 0.4, "distributed_initialized", tp=2, pp=1, cp=1, ep=1, dp=1, ranks={"tp": w.base["rank"], "dp": 0})
        w.emit(T + 0.5, "config_validated", fingerprint=FP_A, config={})
        done = {"trigger": "validate", "source": "CONFIGURED", "dest": "VALIDATED", "duration_s": 0.25}
        w.emit(T + 0.5, "transition_completed", config_fingerprint=FP_A, **done)
        w.emit(T + 1, "peer_failed", peer_rank=1 - w.base["rank"], peer_state="SERVICES_READY", error="gone")
    for rank in load([str(_write(tmp_path / "logs", *writers))]).ranks:
        violation, failure = [m for m in rank.marks if m.kind != "finding"]
        assert (violation.ts, violation.event, violation.kind, violation.state, violation.peer) == (
            T + 0.3,
            "tripwire_violation",
            "violation",
            "CONFIGURED",
            None,
        )
        assert (failure.ts, failure.kind, failure.state, failure.peer) == (
            T + 1,
            "failure",
            "SERVICES_READY",
            1 - rank.rank,
        )
        assert rank.label == f"rank {rank.rank} (tp {rank.rank}, dp 0)"
        assert rank.fingerprints == ((T + 0.5, FP_A),)


def test_a_changed_record_of_the_first_rank_is_a_finding_mark_at_its_time(tmp_path: Path) -> None:
    w = ChainWriter("run-f", 0, 1)
    _cycle(w, T, 0, "node0", FP_A)
    w.lines[1] = w.lines[1].replace(b"CONFIGURED", b"CONFIGURE")
    (rank,) = load([str(_write(tmp_path / "logs", w))]).ranks
    found = [m for m in rank.marks if m.kind == "finding" and "changed" in m.detail]
    assert [m.ts for m in found] == [T + 0.25]  # the transition_started, between records at T and T + 0.5


def test_a_damaged_log_is_read_line_by_line_to_its_last_record(tmp_path: Path) -> None:
    """A damaged first line and no newline after the last record: the whole-file decoder gives up,
    the line by line reader keeps every start, step, generation, config and failure."""
    w = ChainWriter("run-d", 0, 1)
    _cycle(w, T, 0, "node0", FP_A)
    w.emit(T + 1, "generation_started", generation=2)
    w.emit(T + 2, "step_completed", loss=0.5, duration_s=0.25)
    w.emit(T + 3, "peer_failed", peer_rank=1, peer_state="VALIDATED", error="gone")
    path = _write(tmp_path / "logs", w, damaged_first=True, no_last_newline=True) / "rank-00000.jsonl"
    details = read_details(str(path))[0]
    assert [(a.ts, a.attempt, a.host) for a in details.attempts] == [(T, 0, "node0")]
    assert details.steps == [(T + 2, 0, 0.5, 0.25)]  # a step without its number: step 0
    assert details.generations == [(T + 1, 2)]
    assert details.configs == [(T + 0.5, FP_A, {"train": {"seed": 0}})]  # the config kept by default
    assert [(m.ts, m.event) for m in details.marks] == [(T + 3, "peer_failed")]


def test_a_step_without_its_number_is_step_0_in_a_whole_log(tmp_path: Path) -> None:
    w = ChainWriter("run-d", 0, 1)
    _cycle(w, T, 0, "node0", FP_A)
    w.emit(T + 2, "step_completed", loss=0.5, duration_s=0.25)
    path = _write(tmp_path / "logs", w) / "rank-00000.jsonl"
    assert read_details(str(path))[0].steps == [(T + 2, 0, 0.5, 0.25)]


def test_at_most_200_marks_are_kept_of_a_rank(tmp_path: Path) -> None:
    w = ChainWriter("run-v", 0, 1)
    _cycle(w, T, 0, "node0", FP_A)
    trip = {"target": "torch.manual_seed", "kind": "rng", "owner": "init_distributed", "policy": "warn"}
    for i in range(201):
        w.emit(T + 1 + i / 1024, "tripwire_violation", state="VALIDATED", trigger="start_services", **trip)
    path = _write(tmp_path / "logs", w) / "rank-00000.jsonl"
    assert len(read_details(str(path))[0].marks) == 200


def test_load_takes_its_paths_by_name_and_refuses_a_directory_without_a_timed_record(tmp_path: Path) -> None:
    w = ChainWriter("run-l", 0, 1)
    _cycle(w, T, 0, "node0", FP_A)
    assert load(paths=[str(_write(tmp_path / "logs", w))]).world_size == 1
    (tmp_path / "empty").mkdir()
    with pytest.raises(LogUnreadable) as refused:
        load([str(tmp_path / "empty")])
    assert refused.value.context["source"] == str(tmp_path / "empty")
    (tmp_path / "empty2").mkdir()
    with pytest.raises(LogUnreadable) as refused:
        load([str(tmp_path / "empty"), str(tmp_path / "empty2")])
    assert refused.value.context["source"] == str(tmp_path / "empty")  # the first path given


def test_an_unreadable_log_is_refused_with_its_own_error(tmp_path: Path) -> None:
    w = ChainWriter("run-l", 0, 1)
    _cycle(w, T, 0, "node0", FP_A)
    w.lines.append(b'{"event":"warning","ts":1.0}\n')  # no envelope: the audit cannot read it
    with pytest.raises(LogUnreadable, match="rank-00000.jsonl"):
        load([str(_write(tmp_path / "logs", w))])


def test_a_transition_cut_by_a_failure_ends_at_the_failure_not_at_the_last_record(tmp_path: Path) -> None:
    w = ChainWriter("run-u", 0, 2)
    _cycle(w, T, 0, "node0", FP_A)
    w.emit(T + 1, "transition_started", trigger="start_services", source="VALIDATED")
    w.emit(T + 2, "peer_failed", peer_rank=1, peer_state="VALIDATED", error="gone")
    w.emit(T + 3, "warning", category="UserWarning", module="x", message="late", lineno=None)
    (rank,) = load([str(_write(tmp_path / "logs", w))]).ranks
    assert rank.unfinished == ("start_services", T + 1, T + 2)


def test_a_failure_stamped_in_whole_seconds_is_a_mark_of_the_first_rank(tmp_path: Path) -> None:
    w = ChainWriter("run-i", 0, 2)
    _cycle(w, T, 0, "node0", FP_A)
    w.emit(int(T) + 1, "peer_failed", peer_rank=1, peer_state="VALIDATED", error="gone")
    (rank,) = load([str(_write(tmp_path / "logs", w))]).ranks
    assert [(m.ts, m.event) for m in rank.marks if m.kind == "failure"] == [(T + 1, "peer_failed")]


def _ranks(world: int) -> list[ChainWriter]:
    writers = [ChainWriter("run-s", r, world) for r in range(world)]
    for w in writers:
        _cycle(w, T, 0, "node0", FP_A)
    return writers


@pytest.mark.parametrize(
    ("written", "refused"),
    [
        ({"step": "3", "loss": 0.5, "duration_s": 0.25}, "field 'step' is '3', expected int"),
        ({"step": 3, "loss": "0.5", "duration_s": 0.25}, "field 'loss' is '0.5', expected float | None"),
        ({"step": 3, "loss": 0.5, "duration_s": "0.25"}, "field 'duration_s' is '0.25', expected float"),
    ],
)
def test_a_step_whose_field_is_not_a_number_is_refused_naming_its_file_line_and_field_on_every_rank(
    tmp_path: Path, written: dict[str, object], refused: str
) -> None:
    """Rank 0's log is read again whole, every rank's by the audit's tap: on each the step is
    refused as the audit refuses a record (file:line: event: field), not drawn without its field."""
    writers = _ranks(2)
    for w in writers:
        w.emit(T + 2, "step_completed", step=2, loss=0.75, duration_s=0.5)
        w.emit(T + 3, "step_completed", **written)
    logs = _write(tmp_path / "logs", *writers)
    for rank in (0, 1):
        path = logs / f"rank-{rank:05d}.jsonl"
        with pytest.raises(LogUnreadable, match=re.escape(f"{path}:6: step_completed: {refused}")):
            read_details(str(path))
        with pytest.raises(LogUnreadable, match=re.escape(f"{path}:6: step_completed: {refused}")):
            load([str(path)])


def test_a_step_without_its_number_or_loss_is_kept_without_them_on_every_rank(tmp_path: Path) -> None:
    writers = _ranks(2)
    for w in writers:
        w.emit(T + 2, "step_completed", step=2, loss=0.75, duration_s=0.5)
        w.emit(T + 3, "step_completed", loss=None, duration_s=1)
    for rank in load([str(_write(tmp_path / "logs", *writers))]).ranks:
        assert rank.steps == ((T + 2, 2, 0.75, 0.5), (T + 3, 0, None, 1.0)), rank.rank


def test_each_field_of_a_mark_is_cut_to_160_characters(tmp_path: Path) -> None:
    (w,) = _ranks(1)
    error = "RuntimeError: " + "x" * 300
    w.emit(T + 1, "peer_failed", peer_rank=1, peer_state="VALIDATED", error=error)
    (rank,) = load([str(_write(tmp_path / "logs", w))]).ranks
    (mark,) = [m for m in rank.marks if m.kind == "failure"]
    assert mark.detail == f"error={error[:160]}, peer_rank=1, peer_state=VALIDATED"


def test_a_log_whose_kept_record_has_a_time_that_is_not_a_number_is_refused_naming_its_line(tmp_path: Path) -> None:
    """The audit's tap sees the record before the audit refuses it: the export's error is the
    audit's (file, line, field), not a crash on the time it could not read."""
    writers = _ranks(2)
    writers[1].emit(T + 1, "peer_failed", peer_rank=0, peer_state="VALIDATED", error="gone")
    writers[1].lines[-1] = writers[1].lines[-1].replace(f'"ts":{T + 1}'.encode(), b'"ts":"soon"')
    with pytest.raises(LogUnreadable, match=r"rank-00001.jsonl:5: field 'ts' is 'soon', expected a number"):
        load([str(_write(tmp_path / "logs", *writers))])


def test_a_transition_started_the_instant_the_one_before_completed_is_drawn_unfinished(tmp_path: Path) -> None:
    (w,) = _ranks(1)
    w.emit(T + 0.5, "transition_started", trigger="start_services", source="VALIDATED")
    w.emit(T + 2, "peer_failed", peer_rank=1, peer_state="VALIDATED", error="gone")
    (rank,) = load([str(_write(tmp_path / "logs", w))]).ranks
    assert rank.unfinished == ("start_services", T + 0.5, T + 2)


def test_a_failure_whose_transition_started_in_an_earlier_file_draws_no_unfinished_transition(tmp_path: Path) -> None:
    """The file continues a log: its first record is after the transition started, so there is no
    start to draw it from (not the epoch)."""
    w = ChainWriter("run-u", 0, 2)
    w.emit(T, "warning", category="UserWarning", module="x", message="continued", lineno=None)
    error = {
        "trigger": "start_services",
        "source": "VALIDATED",
        "error_type": "OSError",
        "error": "disk",
        "duration_s": 9,
    }
    w.emit(T + 1, "transition_failed", **error)
    (rank,) = load([str(_write(tmp_path / "logs", w))]).ranks
    assert rank.failed and rank.unfinished is None


def test_what_changed_between_cycles_is_read_from_rank_0_when_its_logs_are_given_last(tmp_path: Path) -> None:
    """Two nodes' log directories, the one holding rank 0 given second: the configs compared are
    still rank 0's (only the first rank's log is read for them)."""
    writers = [ChainWriter("run-c", r, 2) for r in range(2)]
    for w in writers:
        _cycle(w, T, 0, "node0", FP_A)
        _cycle(w, T + 10, 1, "node0", FP_A)
    node0, node1 = _write(tmp_path / "node0", writers[0]), _write(tmp_path / "node1", writers[1])
    _, second = load([str(node1), str(node0)]).cycles
    assert second.changes == ("train.seed: 0 -> 1",)


@pytest.mark.parametrize(
    ("line", "written", "changed", "ts"),
    [(1, b'"policy":"raise"', b'"policy":"warn"', T), (5, b'"error":"gone"', b'"error":"lost"', T + 1)],
)
def test_a_changed_first_or_last_record_of_another_rank_is_a_finding_mark_at_its_time(
    tmp_path: Path, line: int, written: bytes, changed: bytes, ts: float
) -> None:
    """Rank 1's log is not read again whole: the time of the line a finding points at, its first
    or its last, is read on its own."""
    writers = _ranks(2)
    writers[1].emit(T + 1, "peer_failed", peer_rank=0, peer_state="VALIDATED", error="gone")
    assert written in writers[1].lines[line - 1]
    writers[1].lines[line - 1] = writers[1].lines[line - 1].replace(written, changed)
    rank = load([str(_write(tmp_path / "logs", *writers))]).ranks[1]
    found = [m for m in rank.marks if m.kind == "finding" and "changed" in m.detail]
    assert [m.ts for m in found] == [ts]


def test_the_logs_of_two_runs_are_ordered_by_rank_then_run_id(tmp_path: Path) -> None:
    runs = {}
    for run_id in ("run-b", "run-a"):
        writers = [ChainWriter(run_id, r, 2) for r in range(2)]
        for w in writers:
            _cycle(w, T, 0, "node0", FP_A)
        runs[run_id] = str(_write(tmp_path / run_id, *writers))
    trace = load([runs["run-b"], runs["run-a"]])
    assert [(r.rank, r.audit.run_id) for r in trace.ranks] == [(0, "run-a"), (0, "run-b"), (1, "run-a"), (1, "run-b")]


def test_a_file_holding_two_ranks_keeps_each_ranks_steps(tmp_path: Path) -> None:
    """A node's logs concatenated into one file (read by the audit's tap, as every file but rank
    0's): its steps are told apart by rank."""
    writers = _ranks(3)
    for w in writers:
        w.emit(T + 2, "step_completed", step=w.base["rank"], loss=0.75, duration_s=0.5)
    node = tmp_path / "node1.jsonl"
    node.write_bytes(b"".join(writers[1].lines + writers[2].lines))
    trace = load([str(_write(tmp_path / "node0", writers[0])), str(node)])
    assert [(r.rank, r.steps) for r in trace.ranks] == [(r, ((T + 2, r, 0.75, 0.5),)) for r in range(3)]


def test_a_log_whose_kept_record_has_an_event_that_is_not_a_name_is_refused_naming_its_line(tmp_path: Path) -> None:
    writers = _ranks(2)
    writers[1].emit(T + 1, "peer_failed", peer_rank=0, peer_state="VALIDATED", error="gone")
    writers[1].lines[-1] = writers[1].lines[-1].replace(b'"event":"peer_failed"', b'"event":["peer_failed"]')
    with pytest.raises(LogUnreadable, match=r"rank-00001.jsonl:5: "):
        load([str(_write(tmp_path / "logs", *writers))])


def test_a_cycle_that_failed_before_validating_its_config_compares_no_config(tmp_path: Path) -> None:
    (w,) = _ranks(1)
    w.emit(
        T + 10, "lifecycle_started", plan="training", target="CALLBACKS_BOUND", policy="raise", attempt=1, host="node0"
    )
    w.emit(T + 10.25, "transition_started", trigger="validate", source="CONFIGURED")
    error = {
        "trigger": "validate",
        "source": "CONFIGURED",
        "error_type": "ConfigError",
        "error": "bad",
        "duration_s": 0.25,
    }
    w.emit(T + 10.5, "transition_failed", **error)
    _, second = load([str(_write(tmp_path / "logs", w))]).cycles
    assert (second.failed, second.fingerprints) == ((0,), ())
    assert second.changes == (f"config fingerprint: {FP_A[:12]} -> none",)


def test_a_transition_the_rank_failed_in_the_instant_it_started_is_drawn_unfinished(tmp_path: Path) -> None:
    (w,) = _ranks(1)
    w.emit(T + 2, "transition_started", trigger="start_services", source="VALIDATED")
    w.emit(T + 2, "peer_failed", peer_rank=1, peer_state="VALIDATED", error="gone")
    (rank,) = load([str(_write(tmp_path / "logs", w))]).ranks
    assert rank.unfinished == ("start_services", T + 2, T + 2)


def test_eight_missing_ranks_are_all_named(tmp_path: Path) -> None:
    writers = [ChainWriter("run-c", r, 9) for r in range(9)]
    for w in writers:
        _cycle(w, T, 0, "node0", FP_A)
    _cycle(writers[0], T + 10, 1, "node0", FP_A)
    _, second = load([str(_write(tmp_path / "logs", *writers))]).cycles
    assert second.changes[0] == "ranks: 9 -> 1, missing 1,2,3,4,5,6,7,8"


def test_what_a_continued_log_did_before_its_first_start_is_drawn_in_its_first_cycle(tmp_path: Path) -> None:
    """The file starts mid-run (its process's lifecycle_started is in an earlier file), then the
    rank restarts twice: the transition before the first start is not drawn in a later cycle."""
    w = ChainWriter("run-c", 0, 1)
    _cycle(w, T, 0, "node0", FP_A)
    w.lines = w.lines[1:]
    _cycle(w, T + 10, 1, "node0", FP_A)
    _cycle(w, T + 20, 2, "node0", FP_A)
    (rank,) = load([str(_write(tmp_path / "logs", w))]).ranks
    assert [(seg.start, attempt) for seg, attempt in rank.segments] == [(T + 0.25, 1), (T + 10.25, 1), (T + 20.25, 2)]


def test_a_rank_whose_log_is_one_record_is_exported(tmp_path: Path) -> None:
    """Rank 1 died right after it started: the audit's tap is given a batch of one record."""
    writers = [ChainWriter("run-o", r, 2) for r in range(2)]
    _cycle(writers[0], T, 0, "node0", FP_A)
    writers[1].emit(T, "lifecycle_started", plan="training", target="CALLBACKS_BOUND", policy="raise", host="node1")
    trace = load([str(_write(tmp_path / "logs", *writers))])
    assert [(r.rank, [a.host for a in r.attempts]) for r in trace.ranks] == [(0, ["node0"]), (1, ["node1"])]


def test_a_finding_mark_holds_the_first_300_characters_of_its_message(tmp_path: Path) -> None:
    (w,) = _ranks(1)
    w.emit(T + 1, "transition_started", trigger="start_services", source="VALIDATED")
    failed = {"trigger": "start_services", "source": "VALIDATED", "error": "x" * 300, "duration_s": 1}
    w.emit(T + 2, "transition_failed", error_type="E" * 300, **failed)
    (rank,) = load([str(_write(tmp_path / "logs", w))]).ranks
    found = [(f.message, m.detail) for f in rank.audit.findings() for m in rank.marks if m.event == f.rule]
    assert found and all(len(message) > 300 and detail == message[:300] for message, detail in found)


def test_a_cycle_lists_its_first_40_changes(tmp_path: Path) -> None:
    w = ChainWriter("run-c", 0, 1)
    for attempt in range(2):
        t = T + 10 * attempt
        w.emit(t, "lifecycle_started", plan="training", target="CALLBACKS_BOUND", policy="raise", attempt=attempt)
        w.emit(t + 0.5, "config_validated", fingerprint=FP_A, config={f"k{i:02d}": attempt for i in range(50)})
    _, second = load([str(_write(tmp_path / "logs", w))]).cycles
    assert second.changes == tuple(f"k{i:02d}: 0 -> 1" for i in range(40))
