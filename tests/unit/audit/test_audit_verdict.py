"""`lifecycle audit --format verdict`: one versioned JSON document naming the culprit rank and host,
the state and phase, the class (config: STOP; infrastructure: RESTART without the lost host;
user-code: STOP) and the records that show it. Logs written by the real AuditLog."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from audit_logs import clean_events, index, write_events
from test_audit_cause import aborted, peer_failed, rank_log, until

from lifecycle.audit import audit, verdict
from lifecycle.cli import main
from lifecycle.log import Tail
from lifecycle.testing import VERDICT_VERSION, follow_verdict
from states import STARTUP_ORDER, State


def failing(trigger: str, source: str, error_type: str, error: str, **field: str) -> tuple[str, dict[str, Any]]:
    fields = {"trigger": trigger, "source": source, "error_type": error_type, "error": error, "duration_s": 1.0}
    return "transition_failed", fields | field


def judged(log_dir: Path) -> dict[str, Any]:
    result = audit([str(log_dir)], jobs=1)
    return verdict(result.root_causes, result.ranks, result.findings, unreadable=len(result.errors))


def two_ranks(tmp: Path, culprit: list[tuple[str, dict[str, Any]]], trigger: str) -> dict[str, Any]:
    """Rank 1 ends with `culprit`'s records; rank 0 is stopped by SIGTERM later (a victim)."""
    head = until(trigger)
    rank_log(tmp, 1, [*head, *culprit], start=100.0, world=2)
    rank_log(tmp, 0, [*head, aborted()], start=100.0, world=2, at={len(head): 130.0})
    return judged(tmp)


def test_a_refused_setting_is_config_so_stop_naming_the_rank_host_state_and_phase(tmp_path: Path) -> None:
    refused = failing("validate", "CONFIGURED", "ConfigError", "model.hidden_size=30 is not a multiple", field="model")
    doc = two_ranks(tmp_path, [refused], "validate")
    assert doc["verdict"] == VERDICT_VERSION == 1 and doc["outcome"] == "failed"
    assert doc["culprit"] == {"rank": 1, "host": "h"} and (doc["state"], doc["phase"]) == ("CONFIGURED", "validate")
    assert (doc["class"], doc["action"], doc["exclude_hosts"]) == ("config", "STOP", [])
    assert doc["victims"] == [0] and doc["evidence"][0] == {
        "source": str(tmp_path / "rank-00001.jsonl"),
        "line": len(until("validate")) + 1,
        "rank": 1,
        "kind": "failed",
    }


@pytest.mark.parametrize(
    ("field", "klass", "action"),
    [
        ("parallel.world_size", "config", "STOP"),
        ("startup.timeout_s", "infrastructure", "RESTART"),
        ("process_group.timeout", "config", "STOP"),  # a group's own, shorter timeout fired: it would again
        ("startup", "infrastructure", "RESTART"),
    ],
)
def test_a_distributed_error_is_classed_by_the_field_it_names(
    tmp_path: Path, field: str, klass: str, action: str
) -> None:
    error = failing("init_distributed", "SERVICES_READY", "DistributedError", "two worlds met ...", field=field)
    doc = two_ranks(tmp_path, [error], "init_distributed")
    assert (doc["class"], doc["action"], doc["state"]) == (klass, action, "SERVICES_READY")
    assert doc["exclude_hosts"] == []  # the rank that timed out waited; it is not the lost one


def test_a_rank_whose_log_stops_is_infrastructure_restart_without_its_host(tmp_path: Path) -> None:
    doc = two_ranks(tmp_path, [("side_effect", {"kind": "model", "trigger": "build_model"})], "build_model")
    assert (doc["class"], doc["action"], doc["exclude_hosts"]) == ("infrastructure", "RESTART", ["h"])
    assert doc["culprit"]["rank"] == 1 and doc["phase"] == "build_model" and "log stops" in doc["reason"]


@pytest.mark.parametrize(
    ("error_type", "error", "klass"),
    [
        ("RuntimeError", "my provider broke", "user-code"),
        ("KeyError", "'decoder'", "user-code"),
        ("OSError", "[Errno 28] No space left on device", "infrastructure"),
        ("DistNetworkError", "Connection reset by peer", "infrastructure"),
        ("BindingError", "bound to the provider's config", "config"),
    ],
)
def test_an_exception_is_classed_by_its_type(tmp_path: Path, error_type: str, error: str, klass: str) -> None:
    doc = two_ranks(tmp_path, [failing("build_model", "DISTRIBUTED", error_type, error)], "build_model")
    assert doc["class"] == klass and doc["culprit"]["rank"] == 1


def test_a_clean_run_gives_a_clean_verdict(tmp_path: Path) -> None:
    write_events(tmp_path, clean_events(), rank=0, world=1)
    assert judged(tmp_path) == {"verdict": 1, "outcome": "clean", "findings": 0, "ranks": 1}


def test_the_cli_prints_the_verdict_as_one_json_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    two_ranks(tmp_path, [failing("validate", "CONFIGURED", "ConfigError", "bad")], "validate")
    code = main(["audit", "--format", "verdict", str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    assert code == 1 and len(out) == 1 and json.loads(out[0])["action"] == "STOP"


def test_another_tools_verdict_file_is_not_replaced_but_ours_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CI tool's `{"verdict": ...}` begins as ours does; only our version and outcome make it ours."""
    logs = tmp_path / "logs"
    logs.mkdir()
    write_events(logs, clean_events(), rank=0, world=1)
    theirs = tmp_path / "theirs.json"
    theirs.write_bytes(b'{"verdict": "approved", "by": "review-bot"}\n')
    argv = ["audit", "--format", "verdict", "--follow", str(logs), "--idle-timeout", "0"]
    assert main([*argv, "--output", str(theirs)]) == 2
    assert "not an output we wrote" in capsys.readouterr().err
    assert theirs.read_bytes() == b'{"verdict": "approved", "by": "review-bot"}\n'
    ours = tmp_path / "ours.json"
    for _ in range(2):  # written, then replaced: it is ours
        assert main([*argv, "--output", str(ours)]) == 0
        assert json.loads(ours.read_bytes())["outcome"] == "clean"


def test_following_a_finished_clean_run_gives_the_clean_verdict_without_waiting_for_idle(tmp_path: Path) -> None:
    write_events(tmp_path, clean_events(), rank=0, world=1)
    doc = follow_verdict(tmp_path, poll_s=0.01, idle_timeout_s=600.0)  # returns at once: every rank shut down
    assert doc == {"verdict": 1, "outcome": "clean", "findings": 0, "ranks": 1}


@pytest.mark.parametrize("line", [b"[1]", b'"a record"'])
def test_following_a_log_with_a_line_that_is_no_json_object_gives_unreadable_naming_the_line(
    tmp_path: Path, line: bytes
) -> None:
    write_events(tmp_path, clean_events(), rank=0, world=1)
    log = next(tmp_path.glob("rank-*.jsonl"))
    first, *rest = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(first + line + b"\n" + b"".join(rest))
    doc = follow_verdict(tmp_path, poll_s=0.01, idle_timeout_s=0.05)
    assert (doc["outcome"], doc["where"]) == ("unreadable", [f"{log}:2"])
    assert doc["reason"].startswith("not a record (")


def test_following_gives_the_failure_once_known_and_judges_a_log_that_stops_as_a_rank_that_died(tmp_path: Path) -> None:
    two_ranks(tmp_path, [failing("validate", "CONFIGURED", "ConfigError", "bad")], "validate")
    assert follow_verdict(tmp_path, poll_s=0.01, grace_s=0.0)["class"] == "config"
    stopped = tmp_path / "stopped"
    rank_log(stopped, 0, until("build_model"), start=100.0, world=1)  # no failure record: it stops
    doc = follow_verdict(stopped, poll_s=0.01, idle_timeout_s=0.05)
    assert (doc["class"], doc["exclude_hosts"], doc["phase"]) == ("infrastructure", ["h"], "build_model")


def test_follow_without_the_verdict_format_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["audit", "--follow", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == "lifecycle audit: --follow needs --format verdict and one log directory."


def test_a_job_stopped_from_outside_names_the_first_rank_stopped_and_restarts(tmp_path: Path) -> None:
    head = until("build_model")
    rank_log(tmp_path, 1, [*head, aborted()], start=100.0, world=2, at={len(head): 120.0})
    rank_log(tmp_path, 0, [*head, aborted()], start=100.0, world=2, at={len(head): 125.0})
    doc = judged(tmp_path)
    assert (doc["outcome"], doc["signal"]) == ("stopped", "SIGTERM")  # not failed: no rank failed on its own
    assert doc["culprit"] == {"rank": 1, "host": "h"} and (doc["class"], doc["action"]) == ("infrastructure", "RESTART")
    assert doc["state"] == "DISTRIBUTED" and doc["exclude_hosts"] == []  # a signal: the host is not at fault


def test_a_timeout_in_a_group_shorter_than_the_budget_is_config_not_a_flaky_node(tmp_path: Path) -> None:
    group = {"name": "DATA_SHARDS", "backend": "cpu:gloo", "size": 2, "timeout_s": 3.0, "created_by": "x:f:1"}
    made = [
        (
            "timeouts_read",
            {"configured_s": 600.0, "world_s": 600.0, "store_s": 600.0, "watch_s": 600.0, "groups": [], "corrected": 0},
        ),
        ("group_created", group | {"connect_s": 0.01}),
    ]
    waited = failing(
        "build_model", "DISTRIBUTED", "DistributedError", "DISTRIBUTED timed out", field="startup.timeout_s"
    )
    doc = two_ranks(tmp_path, [*made, waited], "build_model")
    assert (doc["class"], doc["action"], doc["culprit"]["rank"]) == ("config", "STOP", 1)
    assert any(e.get("rule") == "LA028" for e in doc["evidence"])  # the reason is in the evidence


def test_following_judges_a_silent_rank_as_died_once_another_rank_shut_down(tmp_path: Path) -> None:
    rank_log(tmp_path, 0, clean_events(), start=100.0, world=2)  # shut down
    rank_log(tmp_path, 1, until("build_model"), start=100.0, world=2)  # silent since: its disk is full
    started = time.monotonic()
    doc = follow_verdict(tmp_path, poll_s=0.01, stall_s=0.2, idle_timeout_s=600.0)
    assert time.monotonic() - started < 60.0  # not the idle timeout
    assert (doc["culprit"], doc["class"], doc["exclude_hosts"]) == ({"rank": 1, "host": "h"}, "infrastructure", ["h"])


def _trained(*after: tuple[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """A startup to CALLBACKS_BOUND, step 1, then `after`."""
    ev = clean_events()
    return [*ev[: index(ev, "first_step_finalized") + 1], *after]


LAZY = ("group_created", {"name": "EVAL", "backend": "cpu:gloo", "size": 2, "timeout_s": 1800.0, "created_by": "t:f:9"})
STEP_2_TIMED_OUT = ("state_timeout", {"state": "CALLBACKS_BOUND", "trigger": "step 2", "timeout_s": 20.0})


def _lazy_group_skipped(tmp: Path, *, skipper_made_it: bool = True, between: int = 0) -> dict[str, Any]:
    """Both ranks made group EVAL after binding (rank 1 only if `skipper_made_it`), `between` steps completed;
    rank 1 then timed out in step 2's collective, and rank 0, waiting in EVAL's first collective, was ended."""
    steps = [("step_completed", {"step": n, "loss": 1.0, "duration_s": 0.1}) for n in range(2, 2 + between)]
    made = [LAZY] if skipper_made_it else []
    rank_log(tmp, 1, _trained(*made, *steps, STEP_2_TIMED_OUT), start=100.0, world=2)
    ended = {len(_trained()) + 1 + between: 140.0}  # rank 0's peer_failed, once rank 1 timed out
    rank_log(tmp, 0, _trained(LAZY, *steps, peer_failed(1)), start=100.0, world=2, at=ended)
    return judged(tmp)


def test_a_timeout_in_the_first_step_after_a_group_made_while_training_is_user_code_so_stop(tmp_path: Path) -> None:
    """Megatron-LM #6955: a rank skips the group's lazy first collective; a restart hangs there again."""
    doc = _lazy_group_skipped(tmp_path)
    assert (doc["class"], doc["action"], doc["exclude_hosts"]) == ("user-code", "STOP", [])
    assert doc["culprit"]["rank"] == 1 and doc["state"] == "CALLBACKS_BOUND" and doc["victims"] == [0]
    assert "EVAL (made by t:f:9) was made after CALLBACKS_BOUND (LA029)" in doc["reason"]
    assert any(e.get("rule") == "LA029" for e in doc["evidence"])
    assert follow_verdict(tmp_path, poll_s=0.01)["class"] == "user-code"  # followed alike


def test_a_lazy_group_is_named_also_when_only_the_ranks_left_waiting_made_it(tmp_path: Path) -> None:
    doc = _lazy_group_skipped(tmp_path, skipper_made_it=False)
    assert (doc["class"], doc["culprit"]["rank"]) == ("user-code", 1) and "EVAL" in doc["reason"]


def test_a_timeout_once_a_step_completed_after_the_group_was_made_stays_infrastructure(tmp_path: Path) -> None:
    """Every rank used the group in that step: a later hang is not its lazy first collective."""
    doc = _lazy_group_skipped(tmp_path, between=1)
    assert (doc["class"], doc["action"]) == ("infrastructure", "RESTART") and "LA029" not in doc["reason"]


OUTSIDE = ("group_created", LAZY[1] | {"name": "(this rank is not in it)", "size": 0, "member": False})


def test_the_rank_in_a_lazy_group_is_blamed_though_ranks_outside_it_timed_out_first(tmp_path: Path) -> None:
    """4 ranks: ranks 2 and 3, outside EVAL, time out in step 2 before rank 1, the rank in it that skipped
    its first collective; rank 0, waiting in that collective, is ended by rank 1's failure."""
    timed_out = len(_trained()) + 1
    rank_log(tmp_path, 1, _trained(LAZY, STEP_2_TIMED_OUT), start=100.0, world=4, at={timed_out: 120.5})
    for rank, at in ((2, 120.0), (3, 120.2)):
        rank_log(tmp_path, rank, _trained(OUTSIDE, STEP_2_TIMED_OUT), start=100.0, world=4, at={timed_out: at})
    rank_log(tmp_path, 0, _trained(LAZY, peer_failed(1)), start=100.0, world=4, at={timed_out: 140.0})
    doc = judged(tmp_path)
    assert (doc["culprit"]["rank"], doc["class"], doc["action"]) == (1, "user-code", "STOP")
    assert doc["victims"] == [0, 2, 3] and "EVAL (made by t:f:9)" in doc["reason"]


def test_ranks_outside_a_lazy_group_that_time_out_alone_are_blamed_by_time(tmp_path: Path) -> None:
    """No rank in the group timed out: the first to time out stays the cause."""
    timed_out = len(_trained()) + 1
    for rank, at in ((2, 120.0), (3, 120.2)):
        rank_log(tmp_path, rank, _trained(OUTSIDE, STEP_2_TIMED_OUT), start=100.0, world=4, at={timed_out: at})
    for rank in (0, 1):
        rank_log(tmp_path, rank, _trained(LAZY, peer_failed(2)), start=100.0, world=4, at={timed_out: 140.0})
    doc = judged(tmp_path)
    assert (doc["culprit"]["rank"], doc["class"]) == (2, "user-code") and doc["victims"] == [0, 1, 3]


def test_the_rank_in_a_lazy_group_that_went_on_to_the_next_step_is_blamed_when_only_ranks_outside_timed_out(
    tmp_path: Path,
) -> None:
    """4 ranks, EVAL of ranks 1 and 2: rank 3, outside it, times out first in step 2; its failure stops the
    rest before their own deadlines. Rank 2, in EVAL, was stopped in step 2 too (as rank 0, outside it): it
    went past EVAL's first collective, where rank 1 still waits (in step 1)."""
    _went_on(tmp_path, tmp_path)
    doc = judged(tmp_path)
    assert (doc["culprit"]["rank"], doc["class"], doc["action"], doc["phase"]) == (2, "user-code", "STOP", "step 2")
    assert doc["at_s"] == pytest.approx(20.0)  # when rank 3 timed out, after the first record
    assert doc["victims"] == [0, 1, 3] and "rank 2, in group EVAL (made by t:f:9), went on to 'step 2'" in doc["reason"]


RAISED = failing("step 2", "CALLBACKS_BOUND", "ValueError", "bad batch")
UNNAMED_TIMEOUT = ("state_timeout", {"state": "CALLBACKS_BOUND", "timeout_s": 20.0})  # a log before `trigger`


def _stopped(step: str | None) -> tuple[str, dict[str, Any]]:
    return ("peer_failed", peer_failed(3)[1] | ({"trigger": step} if step else {}))


@pytest.mark.parametrize(
    ("first", "others"),
    [
        # an error of a rank's own, outside the group, is its own fault, whatever the group's ranks did
        (RAISED, [("state_timeout", STEP_2_TIMED_OUT[1]), _stopped("step 2"), _stopped("step 2")]),
        # no step named on either side (logs written before `trigger`): nothing shows a rank went on
        (UNNAMED_TIMEOUT, [_stopped(None), _stopped(None), _stopped(None)]),
    ],
)
def test_a_rank_outside_a_lazy_group_stays_the_cause_without_a_timeout_in_the_step_the_group_went_on_to(
    tmp_path: Path, first: tuple[str, dict[str, Any]], others: list[tuple[str, dict[str, Any]]]
) -> None:
    timed_out = len(_trained()) + 1
    rank_log(tmp_path, 3, _trained(OUTSIDE, first), start=100.0, world=4, at={timed_out: 120.0})
    for rank, stop in enumerate(others):
        made = OUTSIDE if rank == 2 else LAZY
        rank_log(tmp_path, rank, _trained(made, stop), start=100.0, world=4, at={timed_out: 121.0})
    assert judged(tmp_path)["culprit"]["rank"] == 3


def _went_on(log_dir: Path, skipper_dir: Path) -> None:
    """EVAL of ranks 1 and 2 made after step 1; rank 3, outside it, timed out in step 2; rank 2 (its log in
    `skipper_dir`) was stopped in step 2, rank 1 in step 1 (in EVAL's first collective), rank 0 in step 2."""
    timed_out = len(_trained()) + 1
    stopped = {0: ("step 2", OUTSIDE), 1: ("step 1", LAZY), 2: ("step 2", LAZY)}
    rank_log(log_dir, 3, _trained(OUTSIDE, STEP_2_TIMED_OUT), start=100.0, world=4, at={timed_out: 120.0})
    for rank, (step, made) in stopped.items():
        stop = ("peer_failed", peer_failed(3)[1] | {"trigger": step})
        where = skipper_dir if rank == 2 else log_dir
        rank_log(where, rank, _trained(made, stop), start=100.0, world=4, at={timed_out: 120.5})


def test_following_waits_for_the_ranks_of_a_lazy_group_when_a_rank_outside_it_timed_out(tmp_path: Path) -> None:
    """The follower's verdict on the case above, rank 2's last record (its stop) coming 0.3 s after the others:
    not the outside rank that timed out first, whatever the grace for a failure of one's own."""
    later = tmp_path / "later"
    later.mkdir()
    _went_on(tmp_path, later)
    *head, last = (later / "rank-00002.jsonl").read_bytes().splitlines(keepends=True)
    (tmp_path / "rank-00002.jsonl").write_bytes(b"".join(head))

    def append() -> None:
        with (tmp_path / "rank-00002.jsonl").open("ab") as log:
            log.write(last)

    arrives = threading.Timer(0.3, append)
    arrives.start()
    try:
        doc = follow_verdict(tmp_path, poll_s=0.01, grace_s=0.01, group_wait_s=60.0)
    finally:
        arrives.join()
    assert (doc["culprit"]["rank"], doc["class"], doc["phase"]) == (2, "user-code", "step 2")


def lost(peer: int) -> tuple[str, dict[str, Any]]:
    """A victim's `peer_failed` naming `peer` lost (frozen: its watcher stood still), as the rank watch writes it."""
    error = "its watcher (pid 7) stood still for 8 s: stopped or hung"
    return "peer_failed", {"peer_rank": peer, "peer_state": "DISTRIBUTED", "error": error, "peer_kind": "lost"}


def test_following_names_a_rank_declared_lost_without_waiting_for_a_record_of_its_own(tmp_path: Path) -> None:
    """A lost rank (gone, or frozen past stale_s) writes nothing more: the verdict does not wait the grace."""
    head = until("build_model")
    rank_log(tmp_path, 1, head, start=100.0, world=2)  # frozen in build_model: its log just stops
    rank_log(tmp_path, 0, [*head, lost(1)], start=100.0, world=2, at={len(head): 110.0})
    started = time.monotonic()
    doc = follow_verdict(tmp_path, poll_s=0.01, grace_s=60.0)
    assert time.monotonic() - started < 30.0, "not the grace"
    assert (doc["culprit"], doc["state"], doc["phase"]) == ({"rank": 1, "host": "h"}, "DISTRIBUTED", "build_model")
    assert (doc["class"], doc["action"], doc["exclude_hosts"]) == ("infrastructure", "RESTART", ["h"])


@pytest.mark.parametrize("kind", ["exception", None])  # None: a log written before `peer_kind`
def test_following_waits_the_grace_for_the_own_record_of_a_rank_named_but_not_lost(
    tmp_path: Path, kind: str | None
) -> None:
    head = until("build_model")
    named = ("peer_failed", {"peer_rank": 1, "peer_state": "DISTRIBUTED", "error": "RuntimeError: x"})
    if kind is not None:
        named[1]["peer_kind"] = kind
    rank_log(tmp_path, 1, head, start=100.0, world=2)
    rank_log(tmp_path, 0, [*head, named], start=100.0, world=2, at={len(head): 110.0})
    started = time.monotonic()
    doc = follow_verdict(tmp_path, poll_s=0.01, grace_s=0.5)
    assert time.monotonic() - started >= 0.5 and doc["culprit"]["rank"] == 1


def test_a_lost_ranks_last_records_written_between_two_reads_are_in_the_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The follower read rank 0's file; rank 0 then went on into bind_callbacks and froze; rank 1 named it lost,
    and the follower read that in the same pass: one more pass, begun after it, has rank 0's last records."""
    whole = rank_log(tmp_path / "whole", 0, until("bind_callbacks"), start=100.0, world=2)
    lines = whole.read_bytes().splitlines(keepends=True)
    run = tmp_path / "run"
    rank_log(run, 1, [*until("bind_callbacks"), lost(0)], start=100.0, world=2)
    culprit = run / "rank-00000.jsonl"
    culprit.write_bytes(b"".join(lines[: len(until("build_model"))]))
    real = Tail.read

    def read(tail: Tail) -> list[bytes]:
        got = real(tail)
        if tail.path == culprit and culprit.stat().st_size < whole.stat().st_size:
            culprit.write_bytes(b"".join(lines))  # written after the follower read it, before rank 1 named it lost
        return got

    monkeypatch.setattr(Tail, "read", read)
    doc = follow_verdict(run, poll_s=0.01, grace_s=60.0)
    binds_from = STARTUP_ORDER[State.CALLBACKS_BOUND.startup_index - 1].name
    assert (doc["culprit"]["rank"], doc["state"], doc["phase"]) == (0, binds_from, "bind_callbacks")
