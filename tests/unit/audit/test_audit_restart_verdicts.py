"""Every event of the schema has a reader, and the in-process restart wrapper's records are read:
a restart storm's `restarts_exhausted` gives `failed` with the culprit it names, and a restart
request (nvidia-resiliency-ext's RankShouldRestart) on a survivor makes it a victim, never the
culprit. Logs written by the real AuditLog; the wrapper itself is tested in tests/integration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from audit_logs import Events, clean_events, index

from lifecycle.audit import audit, verdict
from lifecycle.log import AuditLog, events
from lifecycle.testing import HANDLERS, INFORMATIONAL

T0 = 1_800_000_000.0
CYCLE = "__cycle__"


def test_every_event_of_the_schema_is_read_by_the_audit_or_listed_informational_with_a_reason() -> None:
    unread = sorted(events.ALL - HANDLERS.keys() - INFORMATIONAL.keys())
    assert unread == [], f"events with neither a handler nor a reason in _informational.py: {unread}"
    assert HANDLERS.keys().isdisjoint(INFORMATIONAL), "an event with a handler is not informational"
    assert all(len(reason) > 20 for reason in INFORMATIONAL.values())


def write(log_dir: Path, rank: int, ev: Events, world: int = 2) -> Path:
    """Like audit_logs.write_events, with `(CYCLE, {"cycle": n})` starting restart cycle n."""
    times = iter(T0 + rank * 0.001 + i * 0.01 for i in range(10_000))
    log = AuditLog(run_id="storm", rank=rank, world_size=world, clock=lambda: next(times))
    path = log.open(log_dir)
    assert path is not None
    for event, fields in ev:
        if event == CYCLE:
            log.rebind(cycle=fields["cycle"])
        else:
            log.emit(event, **fields)
    log.close()
    return path


def bound() -> Events:
    ev = clean_events()
    return ev[: index(ev, "first_step_finalized") + 1]


def shut_down() -> Events:
    ev = clean_events()
    return ev[index(ev, "lifecycle_shutdown") :]


def cycle(n: int, cause: str | None, cause_rank: int | None = 1) -> Events:
    started = {"ledger": [], "fingerprint": None, "world_size": 2, "cycle": n}
    ended = {"cause_rank": cause_rank, "cause": cause, "fault_ts": T0, "state": "CALLBACKS_BOUND"}
    return [(CYCLE, {"cycle": n}), ("cycle_started", started), ("cycle_ended", ended)]


def exhausted(cause: str | None, cause_rank: int | None = 1, cycles: int = 2) -> tuple[str, dict[str, Any]]:
    return "restarts_exhausted", {
        "cycles": cycles,
        "max_cycles": cycles,
        "min_world_size": 2,
        "reason": "max_cycles",
        "cause_rank": cause_rank,
        "cause": cause,
    }


def judged(log_dir: Path) -> dict[str, Any]:
    result = audit([str(log_dir)], jobs=1)
    return verdict(result.root_causes, result.ranks, result.findings, errors=result.errors)


def test_a_restart_storm_is_failed_naming_the_wrappers_culprit_and_stops_when_its_error_repeats(tmp_path: Path) -> None:
    """It audited "clean" with 0 findings: nothing read `restarts_exhausted`."""
    for rank in range(2):
        storm = [
            *bound(),
            *cycle(0, "RuntimeError: injected fault at step 1 in cycle 0"),
            *cycle(1, "RuntimeError: injected fault at step 1 in cycle 1"),
            exhausted("RuntimeError: injected fault at step 1 in cycle 1"),
        ]
        write(tmp_path, rank, [*storm, *shut_down()])
    doc = judged(tmp_path)
    assert (doc["outcome"], doc["culprit"]["rank"], doc["class"], doc["action"]) == ("failed", 1, "user-code", "STOP")
    assert doc["victims"] == [0] and "the same RuntimeError ended every cycle" in doc["reason"]
    result = audit([str(tmp_path)], jobs=1)
    assert [(c.rank, c.kind) for c in result.root_causes] == [(1, "exhausted")] and result.exit_code == 1


def test_a_storm_whose_errors_differ_does_not_say_they_repeat(tmp_path: Path) -> None:
    for rank in range(2):
        storm = [
            *bound(),
            *cycle(0, "DistNetworkError: Connection reset by peer"),
            *cycle(1, "RuntimeError: injected fault"),
            exhausted("RuntimeError: injected fault"),
        ]
        write(tmp_path, rank, [*storm, *shut_down()])
    doc = judged(tmp_path)
    assert doc["class"] == "user-code" and "ended every cycle" not in doc["reason"]


def test_a_storm_whose_cause_was_never_published_is_infrastructure_and_restarts(tmp_path: Path) -> None:
    """A lost rank publishes nothing: the wrapper names no rank and no error; nothing says user code."""
    for rank in range(2):
        write(tmp_path, rank, [*bound(), *cycle(0, None, None), exhausted(None, None, 1), *shut_down()])
    doc = judged(tmp_path)
    assert (doc["outcome"], doc["class"], doc["action"], doc["culprit"]["rank"]) == (
        "failed",
        "infrastructure",
        "RESTART",
        None,
    )


def should_restart(trigger: str = "restart", source: str = "CALLBACKS_BOUND") -> tuple[str, dict[str, Any]]:
    return "transition_failed", {
        "trigger": trigger,
        "source": source,
        "error_type": "RankShouldRestart",
        "error": "Interruption.EXCEPTION on ranks={1}",
        "duration_s": 0.1,
    }


def test_sigterm_to_one_rank_during_a_restart_blames_it_not_the_survivor_told_to_restart(tmp_path: Path) -> None:
    """Rank 1 SIGTERMed; rank 0 gets RankShouldRestart and the wrapper gives up naming rank 1. The
    verdict blamed rank 0, user-code, STOP."""
    survivor = [*bound(), *cycle(0, "StartupAborted: SIGTERM", 1), should_restart()]
    write(tmp_path, 0, [*survivor, exhausted("StartupAborted: SIGTERM", 1, 1), *shut_down()])
    write(tmp_path, 1, [*bound(), ("startup_aborted", {"signal": "SIGTERM", "state": "CALLBACKS_BOUND"})])
    doc = judged(tmp_path)
    assert doc["culprit"]["rank"] == 1 and doc["victims"] == [0], doc
    assert (doc["class"], doc["action"]) == ("infrastructure", "RESTART")
    assert doc["outcome"] == "stopped" and doc["signal"] == "SIGTERM"


def test_a_restart_request_on_a_survivor_is_never_the_root_cause_even_when_logged_first(tmp_path: Path) -> None:
    """No restarts_exhausted (the wrapper still running): rank 0's request came before rank 1's own
    failure record was written; rank 1 is the cause."""
    write(tmp_path, 0, [*bound(), should_restart()])
    ev = bound()
    failed = ("transition_failed", {**should_restart()[1], "error_type": "RuntimeError", "error": "boom"})
    write(tmp_path, 1, [*ev, ("step_completed", {"step": 2, "loss": 1.0, "duration_s": 0.1}), failed])
    result = audit([str(tmp_path)], jobs=1)
    assert [(c.rank, c.kind) for c in result.root_causes] == [(1, "failed")]
    assert [(v.rank, v.kind) for v in result.root_causes[0].victims] == [(0, "restart")]
    doc = judged(tmp_path)
    assert (doc["culprit"]["rank"], doc["class"]) == (1, "user-code")


def test_a_restart_request_chained_under_the_engines_error_is_a_victim_too(tmp_path: Path) -> None:
    chained = ("transition_failed", {**should_restart()[1], "error_type": "PhaseFailed"})
    chained[1]["error"] = "restart failed: RankShouldRestart: Interruption.EXCEPTION on ranks={1}"
    write(tmp_path, 0, [*bound(), chained])
    write(tmp_path, 1, [*bound(), ("startup_aborted", {"signal": "SIGTERM", "state": "CALLBACKS_BOUND"})])
    result = audit([str(tmp_path)], jobs=1)
    assert all(c.rank != 0 for c in result.root_causes) and judged(tmp_path)["outcome"] == "stopped"
