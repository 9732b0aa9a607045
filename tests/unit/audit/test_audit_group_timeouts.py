"""The process-group records read back: a group whose timeout is not `startup.timeout_s` is LA028
(shorter: ranks waiting in it are ended before the state's budget, Megatron-Bridge #4011; longer: the
watch ends the wait first), and a group created after CALLBACKS_BOUND is LA029. A group the lifecycle
corrected (`corrected_from`) is no finding."""

from __future__ import annotations

from pathlib import Path

from audit_logs import engine_rank

from lifecycle.audit import audit
from lifecycle.export import load
from lifecycle.log import records
from lifecycle.testing import report_data, text
from states import State

MEGATRONS = "megatron.core.parallel_state:initialize_model_parallel:1465"


def group(name: str, timeout_s: float, **more: object) -> dict[str, object]:
    return {"name": name, "backend": "cpu:gloo", "size": 2, "timeout_s": timeout_s, "created_by": MEGATRONS, **more}


def findings(
    log_dir: Path, groups: list[dict[str, object]], *, world_s: float = 600.0, later: float | None = None
) -> list[tuple[str, str]]:
    lc = engine_rank(log_dir, 0, 1)
    lc.advance_to(State.DISTRIBUTED)
    lc.record(
        records.TimeoutsRead(
            configured_s=600.0, world_s=world_s, store_s=600.0, watch_s=600.0, groups=groups, corrected=0
        )
    )
    if later is not None:
        lc.record(
            records.GroupCreated(
                name="EARLY", backend="cpu:gloo", size=2, timeout_s=later, created_by="train.py:setup:3", connect_s=0.01
            )
        )
        lc.advance_to(State.CALLBACKS_BOUND)
        lc.record(
            records.GroupCreated(
                name="LATE", backend="cpu:gloo", size=2, timeout_s=600.0, created_by="train.py:step:9", connect_s=0.01
            )
        )
    lc.shutdown()
    result = audit([str(log_dir / "rank-00000.jsonl")], jobs=1)
    return [(f.rule, f.message) for f in result.findings if f.rule in ("LA028", "LA029")]


def test_a_group_shorter_than_the_configured_timeout_is_a_finding_naming_it_and_its_creator(tmp_path: Path) -> None:
    [(rule, message)] = findings(
        tmp_path, [group("DATA_PARALLEL_GROUP", 600.0), group("EXPERT_DATA_PARALLEL_GROUP_GLOO", 300.0)]
    )
    assert rule == "LA028"
    assert message.startswith(
        f"group EXPERT_DATA_PARALLEL_GROUP_GLOO (made by {MEGATRONS}) times out after 300 s, before"
    )
    assert "the state's budget startup.timeout_s=600 s" in message


def test_a_group_longer_than_the_configured_timeout_is_a_finding_saying_the_watch_ends_it_first(tmp_path: Path) -> None:
    [(rule, message)] = findings(tmp_path, [group("EXPERT_DATA_PARALLEL_GROUP_GLOO", 1800.0)])
    assert rule == "LA028" and "times out after 1800 s, not startup.timeout_s=600 s: the rank watch ends" in message


def test_a_world_whose_timeout_is_not_the_configured_one_is_a_finding(tmp_path: Path) -> None:
    [(rule, message)] = findings(tmp_path, [], world_s=120.0)
    assert rule == "LA028" and message.startswith("group the default process group (made by init_process_group)")


def test_groups_that_carry_the_configured_timeout_or_were_corrected_to_it_are_no_finding(tmp_path: Path) -> None:
    corrected = group("EXPERT_DATA_PARALLEL_GROUP_GLOO", 600.0, corrected_from=1800.0)
    assert findings(tmp_path, [group("DATA_PARALLEL_GROUP", 600.0), corrected]) == []


def test_a_group_created_later_is_checked_for_its_timeout_and_after_binding_for_its_place(tmp_path: Path) -> None:
    found = findings(tmp_path, [], later=1800.0)
    assert [rule for rule, _ in found] == ["LA028", "LA029"]
    assert "group EARLY (made by train.py:setup:3) times out after 1800 s" in found[0][1]
    assert found[1][1].startswith("group LATE was created after CALLBACKS_BOUND by train.py:step:9")


def test_the_audit_text_shows_each_runs_timeout_map_and_the_ranks_that_read_other_timeouts(tmp_path: Path) -> None:
    corrected = group("EXPERT_DATA_PARALLEL_GROUP_GLOO", 600.0, corrected_from=1800.0)
    for rank, last in ((0, 600.0), (1, 600.0), (2, 300.0)):
        lc = engine_rank(tmp_path, rank, 3)
        lc.advance_to(State.DISTRIBUTED)
        groups = [group("DATA_PARALLEL_GROUP", 600.0), corrected, group("EMBEDDING_GROUP", last)]
        lc.record(
            records.TimeoutsRead(
                configured_s=600.0, world_s=600.0, store_s=600.0, watch_s=600.0, groups=groups, corrected=1
            )
        )
        lc.shutdown()
    report = text(audit([str(tmp_path)], jobs=1)).splitlines()
    at = report.index("timeouts (run run-a, rank 0; 2 ranks the same; ranks 2 (1 rank) read other timeouts):")
    assert report[at + 1] == (
        "  startup.timeout_s=600 s; world 600 s, store 600 s, watch 600 s; 3 groups: 600 s ×3; "
        "set by the lifecycle: EXPERT_DATA_PARALLEL_GROUP_GLOO (was 1800 s)"
    )


def test_the_html_report_carries_each_runs_timeout_map(tmp_path: Path) -> None:
    lc = engine_rank(tmp_path, 0, 1)
    lc.advance_to(State.DISTRIBUTED)
    lc.record(
        records.TimeoutsRead(configured_s=600.0, world_s=600.0, store_s=None, watch_s=None, groups=[], corrected=0)
    )
    lc.shutdown()
    [timeouts] = report_data(load([str(tmp_path)]))["timeouts"]
    assert timeouts == {
        "run_id": "run-a",
        "rank": 0,
        "same": 1,
        "other": [],
        "line": "startup.timeout_s=600 s; world 600 s, store unread, watch unread; 0 groups: none",
    }


def test_the_timeout_map_shows_the_in_process_restart_wrappers_own_timeouts(tmp_path: Path) -> None:
    lc = engine_rank(tmp_path, 0, 1)
    lc.advance_to(State.DISTRIBUTED)
    lc.record(records.TimeoutsRead(configured_s=60.0, world_s=60.0, store_s=60.0, watch_s=60.0, groups=[], corrected=0))
    lc.advance_to(State.CALLBACKS_BOUND)
    wrapper = {"soft_s": 180.0, "hard_s": 360.0, "barrier_s": 540.0, "completion_s": 540.0, "heartbeat_s": None}
    lc.record(records.CycleStarted(ledger=[], fingerprint=None, world_size=1, restart_timeouts=wrapper))
    lc.shutdown()
    [timeouts] = report_data(load([str(tmp_path)]))["timeouts"]
    assert timeouts["line"] == (
        "startup.timeout_s=60 s; world 60 s, store 60 s, watch 60 s; 0 groups: none; in-process restart wrapper: "
        "soft 180 s, hard 360 s, barrier 540 s, completion 540 s, heartbeat unread"
    )


def test_the_timeout_map_shows_the_restart_wrappers_store_client_timeout_last(tmp_path: Path) -> None:
    """Our own connection to the wrapper's store (`store_client_s`, read back from the client) after nvrx's own."""
    lc = engine_rank(tmp_path, 0, 1)
    lc.advance_to(State.DISTRIBUTED)
    lc.record(records.TimeoutsRead(configured_s=60.0, world_s=60.0, store_s=60.0, watch_s=60.0, groups=[], corrected=0))
    lc.advance_to(State.CALLBACKS_BOUND)
    wrapper = {"store_client_s": 300.0, "soft_s": 180.0, "heartbeat_s": 30.0}
    lc.record(records.CycleStarted(ledger=[], fingerprint=None, world_size=1, restart_timeouts=wrapper))
    lc.shutdown()
    [timeouts] = report_data(load([str(tmp_path)]))["timeouts"]
    assert timeouts["line"].endswith("; in-process restart wrapper: soft 180 s, heartbeat 30 s, store client 300 s")
