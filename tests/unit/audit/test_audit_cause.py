"""Cause versus victims (LA018): the audit names the rank whose own failure came first, and lists
the ranks that failed after it. Logs are written by the real AuditLog with a chosen clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from audit_logs import Events, clean_events, clock, index, write_events

from lifecycle.audit import audit
from lifecycle.cli import main
from lifecycle.testing import as_json, text


def until(trigger: str) -> Events:
    """A training startup up to (and including) the transition_started of `trigger`."""
    ev = clean_events()
    return ev[: index(ev, "transition_started", trigger=trigger) + 1]


def rank_log(
    log_dir: Path,
    rank: int,
    ev: Events,
    *,
    start: float,
    world: int = 4,
    step: float = 0.01,
    at: dict[int, float] | None = None,
) -> Path:
    """Rank `rank`'s log: record i at `start + i * step`, or at `at[i]`."""
    times = [(at or {}).get(i, start + i * step) for i in range(len(ev))]
    with clock(times):
        return write_events(log_dir, ev, rank=rank, world=world, run_id="run-k")


def aborted(signal: str = "SIGTERM", state: str = "DISTRIBUTED") -> tuple[str, dict[str, Any]]:
    return "startup_aborted", {"signal": signal, "state": state}


def failed(trigger: str, source: str, error: str = "CUDA out of memory") -> tuple[str, dict[str, Any]]:
    return "transition_failed", {
        "trigger": trigger,
        "source": source,
        "error_type": "OutOfMemoryError",
        "error": error,
        "duration_s": 1.0,
    }


def peer_failed(peer: int) -> tuple[str, dict[str, Any]]:
    return "peer_failed", {"peer_rank": peer, "peer_state": "DISTRIBUTED", "error": "connection reset by peer"}


@pytest.fixture
def killed(tmp_path: Path) -> Path:
    """torchrun, 2 ranks: rank 1 SIGKILLed in build_model (its log stops); torchrun then stops rank
    0 with SIGTERM, which logs startup_aborted."""
    build = [*until("build_model"), ("side_effect", {"kind": "model", "trigger": "build_model"})]
    rank_log(tmp_path, 1, build, start=100.0, world=2)
    rank_log(
        tmp_path, 0, [*until("build_model"), aborted()], start=100.0, world=2, at={len(until("build_model")): 130.0}
    )
    return tmp_path


def test_a_rank_killed_mid_build_is_the_cause_and_the_rank_torchrun_stopped_is_its_victim(killed: Path) -> None:
    result = audit([str(killed)], jobs=1)
    [cause] = result.root_causes
    assert (cause.rank, cause.kind, cause.source) == (1, "died", str(killed / "rank-00001.jsonl"))
    assert "log stops in state DISTRIBUTED during 'build_model'" in cause.message
    assert [(v.rank, v.kind, v.signal) for v in cause.victims] == [(0, "aborted", "SIGTERM")]
    by_rule = {(f.rule, f.rank) for f in result.findings}
    assert {("LA018", 1), ("LA010", 1), ("LA013", 0)} <= by_rule and ("LA010", 0) not in by_rule
    la013 = next(f for f in result.findings if f.rule == "LA013")
    assert "startup aborted by SIGTERM in state DISTRIBUTED during 'build_model'" in la013.message


def test_the_text_summary_and_blame_lead_with_the_root_cause(killed: Path) -> None:
    result = audit([str(killed)], jobs=1)
    report = text(result, show_blame=True).splitlines()
    assert "rank 1 LA018 [root-cause] root cause" in report[1]
    assert "victims: stopped by SIGTERM on ranks 0 (1 rank)" in report[1]
    blame = report[report.index("blame (entry time per state across ranks, slowest first):") + 1]
    assert "LA018 [root-cause]" in blame and "rank 1" in blame


def test_json_output_has_the_root_cause_and_its_victims(killed: Path) -> None:
    doc = orjson.loads(as_json(audit([str(killed)], jobs=1)))
    [cause] = doc["root_causes"]
    assert (cause["rank"], cause["kind"], cause["run_id"]) == (1, "died", "run-k")
    assert cause["at"] == pytest.approx(0.15, abs=0.02)  # its last record, after the first rank started
    assert [(v["rank"], v["kind"], v["signal"]) for v in cause["victims"]] == [(0, "aborted", "SIGTERM")]


def test_ignoring_the_rule_drops_the_lead_line(killed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["audit", str(killed), "--ignore", "root-cause"])
    assert "root cause" not in capsys.readouterr().out


def test_the_earliest_own_failure_is_the_cause_and_later_ones_and_peers_are_victims(tmp_path: Path) -> None:
    head = until("init_distributed")
    rank_log(tmp_path, 2, [*head, failed("init_distributed", "SERVICES_READY")], start=100.0, at={len(head): 105.0})
    timeout = (
        "state_timeout",
        {"state": "SERVICES_READY", "trigger": "init_distributed", "timeout_s": 600, "missing": [2]},
    )
    rank_log(tmp_path, 3, [*head, timeout], start=100.0, at={len(head): 110.0})
    for rank in (0, 1):
        rank_log(tmp_path, rank, [*head, peer_failed(2)], start=100.0, at={len(head): 104.0 + rank * 10})
    [cause] = audit([str(tmp_path)], jobs=1).root_causes
    assert (cause.rank, cause.kind) == (2, "failed")
    assert "'init_distributed' failed in state SERVICES_READY with OutOfMemoryError" in cause.message
    assert {(v.rank, v.kind) for v in cause.victims} == {(0, "peer_failed"), (1, "peer_failed"), (3, "timeout")}


def test_a_tie_goes_to_a_failed_transition_before_a_death_and_then_to_the_lower_rank(tmp_path: Path) -> None:
    head = until("build_model")
    rank_log(tmp_path, 0, head, start=100.0, at={len(head) - 1: 120.0})  # dies, last record at 120
    rank_log(tmp_path, 3, [*head, failed("build_model", "DISTRIBUTED")], start=100.0, at={len(head): 120.0})
    rank_log(tmp_path, 2, [*head, failed("build_model", "DISTRIBUTED")], start=100.0, at={len(head): 120.0})
    rank_log(tmp_path, 1, [*head, aborted()], start=100.0, at={len(head): 119.0})
    [cause] = audit([str(tmp_path)], jobs=1).root_causes
    assert (cause.rank, cause.kind) == (2, "failed")
    assert [(v.rank, v.kind) for v in cause.victims] == [(0, "died"), (1, "aborted"), (3, "failed")]


def test_when_every_failure_is_a_signal_no_rank_is_blamed(tmp_path: Path) -> None:
    for rank in range(4):
        rank_log(tmp_path, rank, [*until("build_model"), aborted("SIGINT")], start=100.0)
    result = audit([str(tmp_path)], jobs=1)
    [cause] = result.root_causes
    assert cause.rank is None and cause.kind == "signal"
    [finding] = [f for f in result.findings if f.rule == "LA018"]
    assert finding.rank is None and "every failed rank was stopped by SIGINT" in finding.message


def test_a_peer_named_by_peer_failed_is_the_cause_when_no_own_failure_is_logged(tmp_path: Path) -> None:
    for rank in (0, 1, 2):
        rank_log(tmp_path, rank, [*until("build_model"), peer_failed(3)], start=100.0)
    [cause] = audit([str(tmp_path)], jobs=1).root_causes
    assert (cause.rank, cause.kind) == (3, "peer")
    assert "named by rank 0's peer_failed record; no log of it was given" in cause.message


def test_a_clean_run_has_no_root_cause(tmp_path: Path) -> None:
    for rank in range(2):
        rank_log(tmp_path, rank, clean_events(), start=1.7e9, world=2)
    result = audit([str(tmp_path)], jobs=1)
    assert result.root_causes == () and result.exit_code == 0
