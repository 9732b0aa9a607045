"""The verdict decided on ranks' summaries as the reader leaves them (`RankAudit`), and the
launcher's records read from real files: which rank is blamed, on which host, in which run, in what
order ranks are named, and the bounds of each list, where several runs, nodes or ranks compete.
The logs that make such summaries are in test_audit_verdict_outcomes.py and
test_audit_launcher_record.py; here each case is one the logs make slowly or by chance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lifecycle.audit import Finding, verdict
from lifecycle.log import JSONValue, records
from lifecycle.testing import (
    Failure,
    LaunchRead,
    RankAudit,
    RootCause,
    RuleId,
    launcher_path,
    read_launches,
    write_launch_ended,
)

RUN = "run-k"


def summary(
    rank: int,
    *,
    run: str = RUN,
    world: int = 4,
    host: str | None = None,
    state: str = "SHUT_DOWN",
    trigger: str | None = None,
    failure: Failure | None = None,
    signalled: str | None = None,
    last_ts: float | None = 1.0,
    source: str | None = None,
    broken: int | None = None,
) -> RankAudit:
    """Rank `rank`'s log read to its end: closed cleanly unless told otherwise."""
    r = RankAudit(source or f"/logs/{run}/rank-{rank:05d}.jsonl")
    r.run_id, r.rank, r.world_size, r.host = run, rank, world, host or f"h{rank}"
    r.records = r.line = 9
    r.state, r.open_trigger, r.failure, r.signalled = state, trigger, failure, signalled
    r.shut = state == "SHUT_DOWN" and failure is None
    r.first_ts, r.last_ts, r.broken = 0.5, last_ts, broken
    return r


def short(rank: int, last_ts: float | None, **kw: Any) -> RankAudit:
    """A log that stops while training, with no failure, signal or shutdown record."""
    return summary(rank, state="CALLBACKS_BOUND", last_ts=last_ts, **kw)


def signalled(rank: int, signal: str = "SIGTERM", last_ts: float | None = 9.0, **kw: Any) -> RankAudit:
    return summary(rank, state="CALLBACKS_BOUND", signalled=signal, last_ts=last_ts, **kw)


def fails(kind: str, *, ts: float | None = 3.0, state: str = "DISTRIBUTED", **kw: Any) -> Failure:
    return Failure(kind=kind, message=f"{kind} here", ts=ts, line=5, state=state, **kw)


def cause(rank: int | None, kind: str = "failed", *, run: str = RUN, at: float | None = 1.0) -> RootCause:
    return RootCause(
        run_id=run, rank=rank, kind=kind, message=f"rank {rank}: {kind}", source="s", line=5, at=at, victims=()
    )


def launches(log_dir: Path, *nodes: dict[str, Any], run: str = RUN) -> LaunchRead:
    """The launcher records of nodes 0, 1, ... written and read back as the audit does."""
    for node, fields in enumerate(nodes):
        given = {"node_rank": node, "host": f"node-{node}", "nproc": 4, "exit": 1, "signal": None, "ended": []}
        record = records.LaunchEnded(**(given | fields))
        assert isinstance(write_launch_ended(log_dir, run_id=run, node_rank=node, world_size=4, record=record), Path)
    read = read_launches([str(launcher_path(log_dir, node)) for node in range(len(nodes))])
    assert not read.errors and not read.broken
    return read


def end(rank: int, ts: float | None, *, exitcode: int = -9, signal: str | None = "SIGKILL") -> dict[str, object]:
    return {"rank": rank, "local_rank": rank % 4, "exitcode": exitcode, "signal": signal, "ts": ts}


def culprit(doc: dict[str, JSONValue]) -> JSONValue:
    return doc["culprit"]["rank"]  # type: ignore[call-overload,index]


# -- no proof: nothing read, tampered chains ---------------------------------------------------


def test_no_log_at_all_is_unreadable_never_clean() -> None:
    doc = verdict([], [], [])
    assert (doc["outcome"], doc["reason"], doc["where"]) == ("unreadable", "no input could be read", [])
    assert verdict([], [summary(0, world=1)], [], unreadable=1)["outcome"] == "unreadable"


def test_unreadable_gives_the_first_input_s_reason_and_names_each(tmp_path: Path) -> None:
    first, second = launcher_path(tmp_path, 0), launcher_path(tmp_path, 1)
    first.write_bytes(b"{}\n")
    second.write_bytes(b"not json\n")
    errors = read_launches([str(first), str(second)]).errors
    doc = verdict([], [summary(r) for r in range(4)], [], errors=errors)
    assert doc["outcome"] == "unreadable" and doc["where"] == [f"{first}:1", f"{second}:1"]
    assert doc["reason"] == errors[0].reason != errors[1].reason


def test_the_first_broken_chain_by_file_and_line_is_named_with_its_run() -> None:
    ranks = [
        summary(0, run="b", source="/logs/b/rank-00000.jsonl", broken=3),
        summary(2, run="a", source="/logs/a/rank-00002.jsonl", broken=7),
        summary(1, run="a"),
    ]
    doc = verdict([], ranks, [])
    assert (doc["outcome"], doc["run_id"]) == ("tampered", "a")
    assert doc["where"] == ["/logs/a/rank-00002.jsonl:7", "/logs/b/rank-00000.jsonl:3"]
    assert str(doc["reason"]).startswith("rank 2's hash chain does not verify at /logs/a/rank-00002.jsonl:7 (LA009)")


def test_two_ranks_read_from_one_stream_are_named_by_the_first_broken_line() -> None:
    ranks = [summary(1, source="-", broken=9), summary(0, source="-", broken=4)]
    doc = verdict([], ranks, [])
    assert doc["where"] == ["-:4", "-:9"] and str(doc["reason"]).startswith("rank 0's")


# -- the logs' own causes: which one, which rank, which host ------------------------------------


def test_the_earliest_cause_is_judged_and_one_without_a_time_comes_last() -> None:
    ranks = [summary(r, failure=fails("failed", error_type="ValueError")) for r in range(4)]
    doc = verdict([cause(3, at=None), cause(2, at=5.0), cause(1, at=2.0)], ranks, [])
    assert (culprit(doc), doc["at_s"], doc["runs_failed"]) == (1, 2.0, 3)
    assert culprit(verdict([cause(1, at=0.5), cause(2, at=0.0)], ranks, [])) == 2


def test_stopped_from_outside_blames_the_first_rank_stopped_by_time_then_rank() -> None:
    ranks = [
        summary(0, failure=fails("aborted", ts=None, signal="SIGINT")),
        summary(3, failure=fails("aborted", ts=5.0, signal="SIGTERM")),
        summary(1, failure=fails("aborted", ts=5.0, signal="SIGTERM")),
        summary(2, failure=fails("restart", ts=1.0)),  # a restart's victim: never the one stopped first
    ]
    doc = verdict([cause(None, "signal")], ranks, [])
    assert (doc["outcome"], culprit(doc), doc["signal"]) == ("stopped", 1, "SIGTERM")
    tie = [summary(r, failure=fails("aborted", ts=5.0, signal="SIGTERM")) for r in (1, 0)]
    assert culprit(verdict([cause(None, "signal")], tie, [])) == 0


def test_without_an_abort_the_first_rank_that_failed_is_named() -> None:
    ranks = [
        summary(0),
        summary(2, failure=fails("peer_failed", ts=6.0)),
        summary(1, failure=fails("peer_failed", ts=3.0)),
    ]
    assert culprit(verdict([cause(None, "peer")], ranks, [])) == 1


def exhausted(error_type: str) -> Failure:
    return fails("exhausted", error_type=error_type, state="CALLBACKS_BOUND")


def cycles(rank: RankAudit, error_type: str, n: int = 3) -> RankAudit:
    rank.cycles = {(0, c): {"ended": True, "cause": f"{error_type}: boom"} for c in range(n)}
    return rank


def test_restarts_exhausted_judges_the_wrapper_s_own_word_of_its_run_when_the_culprit_left_no_log() -> None:
    """The wrapper names rank 1 (`cause_rank`), which left no log: the class is that of the error the
    wrapper published in this run, not another run's, not a victim's."""
    ranks = [
        summary(0, run="old", failure=exhausted("ConfigError")),
        summary(2, state="CALLBACKS_BOUND"),
        summary(3, failure=fails("restart")),
        cycles(summary(0, failure=exhausted("ValueError")), "ValueError"),
    ]
    doc = verdict([cause(1, "exhausted")], ranks, [])
    assert (doc["outcome"], doc["culprit"], doc["class"], doc["action"]) == (
        "failed",
        {"rank": 1, "host": None},
        "user-code",
        "STOP",
    )
    assert str(doc["reason"]).endswith("; the same ValueError ended every cycle")


def test_restarts_exhausted_on_a_culprit_stopped_by_a_signal_is_no_user_code_error() -> None:
    """SIGTERM to rank 1 during an in-process restart: its own record (an abort) is judged, not the
    ValueError rank 0 published in an earlier cycle."""
    ranks = [
        cycles(summary(0, failure=exhausted("ValueError")), "ValueError"),
        summary(1, failure=fails("aborted", signal="SIGTERM")),
    ]
    doc = verdict([cause(1, "exhausted")], ranks, [])
    assert (culprit(doc), doc["class"], doc["action"]) == (1, "infrastructure", "RESTART")


def test_a_culprit_signalled_after_its_startup_is_stopped_not_failed() -> None:
    ranks = [summary(0, failure=fails("peer_failed")), signalled(1, "SIGTERM")]
    doc = verdict([cause(1, "peer")], ranks, [])
    assert (doc["outcome"], culprit(doc), doc["signal"]) == ("stopped", 1, "SIGTERM")


def test_a_rendezvous_timeout_blames_the_first_missing_rank_on_its_host_in_this_run() -> None:
    timed_out = fails("timeout", missing=(3, 5), state="SERVICES_READY")
    ranks = [
        summary(3, run="old", host="old-h3", world=6),
        summary(0, failure=timed_out, world=6),
        *(short(r, 1.0, world=6) for r in (1, 2, 3, 4, 5)),
    ]
    doc = verdict([cause(0, "timeout")], ranks, [])
    assert (doc["culprit"], doc["missing"], doc["class"]) == ({"rank": 3, "host": "h3"}, [3, 5], "infrastructure")


def lost_store(rank: int = 1) -> RankAudit:
    return summary(rank, failure=fails("failed", error_type="DistStoreError"))


def test_a_group_timeout_finding_that_is_not_shorter_than_the_budget_leaves_the_class() -> None:
    long_enough = Finding(rule=RuleId.GROUP_TIMEOUT, message="group tp: its timeout is 1800 s", run_id=RUN, rank=1)
    doc = verdict([cause(1)], [summary(0), lost_store()], [long_enough])
    assert (doc["class"], doc["action"]) == ("infrastructure", "RESTART")


def test_a_group_made_while_training_in_another_run_does_not_make_this_one_user_code() -> None:
    other = summary(0, run="old", failure=fails("failed", error_type="DistBackendError", new_group="dp-extra"))
    doc = verdict([cause(1)], [other, summary(0), lost_store()], [])
    assert (doc["class"], doc["reason"]) == ("infrastructure", "rank 1: failed")


def test_the_evidence_is_the_cause_and_five_findings_on_its_rank() -> None:
    mine = [Finding(rule=f"LA0{n}", message="m", run_id=RUN, rank=1, source="s", line=n) for n in range(30, 38)]
    theirs = Finding(rule="LA040", message="m", run_id=RUN, rank=2, source="s", line=1)
    doc = verdict([cause(1)], [summary(0), lost_store()], [theirs, *mine])
    evidence: Any = doc["evidence"]
    assert [e.get("rule") for e in evidence] == [None, "LA030", "LA031", "LA032", "LA033", "LA034"]


# -- the launcher's records: which run, which rank, which node ----------------------------------


def test_the_launcher_record_of_the_first_cause_s_run_decides(tmp_path: Path) -> None:
    a, b = [short(r, 1.0, run="a") for r in range(4)], [short(r, 1.0, run="b", world=2) for r in range(2)]
    ranks = [a[0], b[0], *a[1:], b[1]]
    read = launches(tmp_path, {"ended": [end(2, 10.0)]}, run="a")
    doc = verdict([cause(3, "died", run="a"), cause(0, "died", run="b")], ranks, [], launches=read)
    assert (doc["run_id"], culprit(doc), doc["evidence"][0]["kind"]) == ("a", 2, "launch_ended")  # type: ignore[index]
    doc = verdict([], ranks, [], launches=read)  # no cause at all: the first log's run
    assert (doc["run_id"], culprit(doc)) == ("a", 2)


def twenty(run: str = RUN) -> list[RankAudit]:
    return [short(r, 1.0, run=run, world=20, trigger=f"t{r}") for r in range(20)]


def test_the_rank_torchrun_saw_end_first_is_blamed_on_its_own_host_with_its_log(tmp_path: Path) -> None:
    read = launches(tmp_path, {"ended": [end(1, 5.0, exitcode=1, signal=None), end(2, 3, exitcode=1, signal=None)]})
    ranks = [short(2, 1.0, run="old", host="old-h2", world=20), *twenty()]
    ranks[3].state = "MODEL_BUILT"  # rank 2's log
    doc = verdict([cause(2, "died")], ranks, [], launches=read)  # a log that stops names no time: torchrun's order
    assert (doc["outcome"], doc["culprit"], doc["class"], doc["action"]) == (
        "failed",
        {"rank": 2, "host": "h2"},
        "user-code",
        "STOP",
    )
    assert (doc["state"], doc["phase"], doc["runs_failed"], doc["exclude_hosts"]) == ("MODEL_BUILT", "t2", 1, [])
    assert str(doc["reason"]).startswith("rank 2 exited 1 first, as torchrun saw it")
    assert doc["evidence"] == [
        {"source": str(launcher_path(tmp_path, 0)), "line": 1, "node": 0, "kind": "launch_ended"},
        {"source": f"/logs/{RUN}/rank-00002.jsonl", "line": 9, "rank": 2, "kind": "stops"},
    ]
    assert doc["victims"] == [0, 1, *range(3, 17)]


def test_a_rank_killed_by_a_signal_is_infrastructure_on_its_host(tmp_path: Path) -> None:
    doc = verdict([], twenty(), [], launches=launches(tmp_path, {"ended": [end(4, 2.0)]}))
    assert (doc["class"], doc["action"], doc["exclude_hosts"]) == ("infrastructure", "RESTART", ["h4"])
    assert str(doc["reason"]).startswith("rank 4 was killed by SIGKILL first")


def test_exit_75_is_a_temporary_failure_to_restart_and_74_and_76_are_the_code_s(tmp_path: Path) -> None:
    for code, klass in ((75, "infrastructure"), (74, "user-code"), (76, "user-code")):
        (tmp_path / str(code)).mkdir()
        read = launches(tmp_path / str(code), {"ended": [end(1, 2.0, exitcode=code, signal=None)]})
        assert verdict([], twenty(), [], launches=read)["class"] == klass, code


def test_a_rank_the_launcher_names_without_a_log_is_blamed_on_the_launcher_s_host(tmp_path: Path) -> None:
    read = launches(tmp_path, {"ended": [end(25, 2.0)]})
    doc = verdict([], twenty(), [], launches=read)
    assert (doc["culprit"], doc["state"], doc["phase"]) == ({"rank": 25, "host": "node-0"}, None, None)
    assert doc["exclude_hosts"] == ["node-0"] and len(doc["evidence"]) == 1  # type: ignore[arg-type]


def test_the_blamed_rank_s_own_failure_gives_the_state_and_phase(tmp_path: Path) -> None:
    ranks = twenty()
    ranks[1] = summary(1, world=20, state="FAILED", failure=fails("peer_failed", trigger="build_model"))
    doc = verdict([], ranks, [], launches=launches(tmp_path, {"ended": [end(1, 2.0)]}))
    assert (doc["state"], doc["phase"]) == ("DISTRIBUTED", "build_model")


def test_ranks_ended_at_one_time_on_two_nodes_are_ordered_by_each_node_s_own_order(tmp_path: Path) -> None:
    read = launches(tmp_path, {"ended": [end(0, 5.0), end(1, 3.0)]}, {"ended": [end(4, 3.0), end(5, None)]})
    assert culprit(verdict([], twenty(), [], launches=read)) == 4


def test_an_end_without_a_time_comes_after_those_with_one(tmp_path: Path) -> None:
    read = launches(tmp_path, {"ended": [end(5, None), end(6, 9.0)]})
    assert culprit(verdict([], twenty(), [], launches=read)) == 6


def test_a_launcher_stopped_by_a_signal_names_the_first_node_and_its_lowest_rank_s_state(tmp_path: Path) -> None:
    read = launches(tmp_path, {"signal": "SIGTERM", "exit": 143}, {"signal": "SIGINT", "exit": 130})
    ranks = [signalled(0, run="old"), signalled(3, run="old"), *twenty()[1:]]
    ranks[2].state = "DISTRIBUTED"  # rank 1 of this run: its lowest
    doc = verdict([cause(None, "signal")], ranks, [], launches=read)
    assert (doc["outcome"], doc["culprit"], doc["signal"]) == ("stopped", {"rank": None, "host": "node-0"}, "SIGTERM")
    assert (doc["state"], doc["phase"]) == ("DISTRIBUTED", "t1")
    assert doc["victims"] == list(range(1, 17))


# -- no cause, no launcher record: the outcomes proved by the ranks' ends --------------------------


def test_a_simulation_that_closed_every_rank_it_drove_is_clean() -> None:
    ranks = [summary(r, world=64) for r in range(2)]
    for r in ranks:
        r.simulated = 2
    assert verdict([], ranks, [])["outcome"] == "clean"


def test_one_rank_that_closed_is_a_clean_world_of_one() -> None:
    assert verdict([], [summary(0, world=1)], [])["outcome"] == "clean"


def test_a_rank_outside_the_declared_world_does_not_stand_for_a_missing_one() -> None:
    doc = verdict([], [summary(r) for r in (0, 1, 2, 4)], [])
    assert (doc["outcome"], doc["missing"]) == ("incomplete", [3])


def test_a_failure_no_cause_explains_still_keeps_the_run_from_clean() -> None:
    doc = verdict([], [summary(0, world=2), summary(1, world=2, failure=fails("restart"))], [])
    assert doc["outcome"] == "incomplete"


def test_the_first_log_to_stop_died_and_the_others_are_its_victims_in_order() -> None:
    ranks = [short(1, 7.0), short(3, 5.0), signalled(2, "SIGINT", 9.0), signalled(0, "SIGTERM", 8.0)]
    doc = verdict([], ranks, [])
    assert (doc["outcome"], culprit(doc), doc["victims"], doc["runs_failed"]) == ("failed", 3, [1, 0, 2], 1)
    assert "and 2 rank(s) were stopped by SIGTERM after it: it died" in str(doc["reason"])


def test_logs_that_stop_at_one_time_are_ordered_by_rank_and_one_without_a_time_last() -> None:
    ranks = [short(2, None), short(1, 5.0), short(0, 5.0), signalled(3)]
    doc = verdict([], ranks, [])
    assert (culprit(doc), doc["victims"]) == (0, [1, 2, 3])


def test_ranks_stopped_from_outside_name_the_first_stopped_and_the_signal() -> None:
    ranks = [summary(0), signalled(3, last_ts=7.0), signalled(1, last_ts=6.0), signalled(2, last_ts=5.0)]
    doc = verdict([], ranks, [])
    assert (doc["outcome"], culprit(doc), doc["victims"]) == ("stopped", 2, [1, 3])
    assert doc["reason"] == "stopped from outside: 3 rank(s) took SIGTERM after the startup, none failed on its own"


def test_an_incomplete_job_names_16_ranks_in_each_list_and_5_records() -> None:
    world = 60
    ranks = [short(r, 100.0 - r, world=world) for r in range(20)]
    ranks += [signalled(r, world=world) for r in (20, 21)]
    ranks += [summary(r, world=world) for r in range(22, 40)]
    doc = verdict([], ranks, [])
    unended = list(range(19, 3, -1))
    missing = list(range(40, 56))
    assert (doc["outcome"], doc["unended"], doc["missing"]) == ("incomplete", unended, missing)
    assert doc["reason"] == (
        f"the job did not end cleanly and the logs do not say why: ranks {unended} stop with no failure, signal "
        f"or shutdown record; ranks {missing} of the {world} have no log; ranks [20, 21] were stopped by a signal"
    )
    assert [e["rank"] for e in doc["evidence"]] == unended[:5]  # type: ignore[index,union-attr]


def test_an_incomplete_job_says_only_what_its_logs_show() -> None:
    doc = verdict([], [summary(r, world=3) for r in range(2)], [])
    assert doc["reason"] == "the job did not end cleanly and the logs do not say why: ranks [2] of the 3 have no log"


def test_a_log_with_no_record_is_no_log_of_its_rank() -> None:
    empty = RankAudit(f"/logs/{RUN}/rank-00001.jsonl")
    empty.run_id, empty.rank, empty.world_size = RUN, 1, 2  # named, but not one record read
    doc = verdict([], [summary(0, world=2), empty], [])
    assert (doc["outcome"], doc["missing"], doc["unended"]) == ("incomplete", [1], [])
