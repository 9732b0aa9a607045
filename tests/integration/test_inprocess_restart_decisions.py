"""What `InProcessRestart` decides and tells, under nvidia-resiliency-ext's real `inprocess.Wrapper`
on 2 spawned ranks, each lifecycle on the in-process phases (no model, no collectives: seconds, not
minutes; the runs with megatron are test_restart.py and test_restart_lost_rank.py): a fault on one
rank restarts both in place and the next cycle names it, a failed release too; the failed cycle's objects are let go of;
the wrapper's timeouts follow `startup.timeout_s`; a restart storm, or a lost rank below
`min_world_size` (the launched world by default, or lower when asked), ends in `restarts_exhausted`
and one line naming why and the last fault; a `min_world_size` outside 1..world is refused before the first cycle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lifecycle.errors import RankFailed
from lifecycle.launchers.local import run_ranks
from lifecycle.testing import installed_problem

PROBLEM = installed_problem()
if PROBLEM is not None:
    pytest.skip(PROBLEM, allow_module_level=True)

FAULT = "RuntimeError: injected fault in cycle {}"


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    from tests.integration.restart_decision_cases import cases

    result: list[dict[str, Any]] = run_ranks(cases, 2, str(tmp_path_factory.mktemp("decisions")), timeout_s=300)
    return result


@pytest.fixture(scope="module")
def lost(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    import orjson

    from tests.integration.restart_decision_cases import rank_lost

    root = tmp_path_factory.mktemp("lost")
    with pytest.raises(RankFailed) as failed:  # rank 1 exits at once: it returns no result
        run_ranks(rank_lost, 2, str(root), timeout_s=300)
    assert set(failed.value.errors) == {1}, failed.value
    rank0: dict[str, Any] = orjson.loads((Path(root) / "rank0.json").read_bytes())
    return rank0


def _events(case: dict[str, Any], event: str) -> list[dict[str, Any]]:
    return [r for r in case["records"] if r["event"] == event]


def test_a_fault_on_one_rank_restarts_every_rank_and_the_next_cycle_names_it(ranks: list[dict[str, Any]]) -> None:
    for rank, out in enumerate(ranks):
        case = out["recovers"]
        assert case["result"]["cycle"] == 1 and case["result"]["state"] == "SERVICES_READY", (rank, case)
        assert (case["cycles"], case["state"]) == (2, "SHUT_DOWN"), rank
        assert {k: case["last_cause"][k] for k in ("rank", "error")} == {"rank": 1, "error": FAULT.format(0)}, rank
        [ended] = _events(case, "cycle_ended")
        assert (ended["cycle"], ended["cause_rank"], ended["cause"]) == (0, 1, FAULT.format(0)), rank
        assert ended["fault_ts"] == case["last_cause"]["ts"], rank
        first, second = _events(case, "cycle_started")
        assert (first["cycle"], first["restart_s"], second["cycle"]) == (0, None, 1), rank
        assert 0 <= second["restart_s"] < 300, rank  # from the fault's time, as published
        assert (second["launched_world_size"], second["world_size"]) == (2, 2), rank


def test_a_release_that_fails_is_the_next_cycles_fault_named_by_the_cycle_after(
    ranks: list[dict[str, Any]],
) -> None:
    """Rank 1's restart back to VALIDATED raises in cycle 1: every rank restarts again, cycle 1's end
    names rank 1 and its error (cut at 500 characters), and cycle 2 trains."""
    for rank, out in enumerate(ranks):
        case = out["release"]
        assert (case["result"]["cycle"], case["cycles"]) == (2, 3), (rank, case)
        ended = [(r["cycle"], r["cause_rank"]) for r in _events(case, "cycle_ended")]
        assert ended == [(0, 1), (1, 1)], (rank, ended)
        cause = _events(case, "cycle_ended")[1]["cause"]
        assert len(cause) == 500 and "injected release fault xxx" in cause, (rank, cause)


def test_the_objects_of_a_failed_cycle_are_let_go_of_before_the_next_trains(ranks: list[dict[str, Any]]) -> None:
    """On the rank that raised and on the rank the wrapper's request interrupted alike; the heap
    is frozen while the cycles run and unfrozen after; no socket cut is left pending."""
    for rank, out in enumerate(ranks):
        case = out["recovers"]
        assert case["result"]["alive_before"] == [False] and case["result"]["frozen"], (rank, case["result"])
        assert (case["alive_after"], case["frozen_after"], case["timers"]) == ([False, False], 0, 0), rank


def test_the_wrappers_timeouts_follow_startup_timeout_s_and_are_logged_each_cycle(
    ranks: list[dict[str, Any]],
) -> None:
    """soft 3 x `startup.timeout_s`, hard 2 x soft, barrier and completion 3 x soft, heartbeat 2 x
    soft up to 30 s (docs/restart.md); our own store client's, 300 s."""
    small = {"soft_s": 13.5, "hard_s": 27.0, "barrier_s": 40.5, "completion_s": 40.5, "heartbeat_s": 27.0}
    large = {"soft_s": 60.0, "hard_s": 120.0, "barrier_s": 180.0, "completion_s": 180.0, "heartbeat_s": 30.0}
    for rank, out in enumerate(ranks):
        assert (out["recovers"]["timeouts"], out["storm"]["timeouts"]) == (small, large), rank
        for started in _events(out["recovers"], "cycle_started"):
            assert started["restart_timeouts"] == small | {"store_client_s": 300.0}, rank


def test_a_restart_storm_ends_in_restarts_exhausted_and_one_line_naming_the_last_fault(
    ranks: list[dict[str, Any]],
) -> None:
    message = (
        "in-process restart gave up: all 2 cycles (max_cycles=2) failed; "
        f"the last fault was on rank 1: {FAULT.format(1)}"
    )
    for rank, out in enumerate(ranks):
        case = out["storm"]
        assert case["exhausted"] == {"message": message, "cycles": 2, "rank": 1, "cause": FAULT.format(1)}, rank
        [record] = _events(case, "restarts_exhausted")
        fields = ("cycle", "cycles", "max_cycles", "min_world_size", "cause_rank", "cause", "reason")
        assert [record[f] for f in fields] == [1, 2, 2, 1, 1, FAULT.format(1), "max_cycles"], rank  # min_world_size=1
        assert (case["state"], case["frozen_after"], case["alive_after"]) == ("SHUT_DOWN", 0, [False, False]), rank


def test_the_options_after_log_dir_are_named_and_nothing_is_known_before_run(ranks: list[dict[str, Any]]) -> None:
    for out in ranks:
        assert "takes from 2 to 4 positional arguments but 5 were given" in out["positional"], out["positional"]
        assert out["before_run"] == {"launched": 0, "cycles": 0}  # the launched world is known at VALIDATED


@pytest.mark.parametrize("case", ["above", "zero"])
def test_a_min_world_size_outside_1_to_the_world_is_refused_before_the_first_cycle(
    ranks: list[dict[str, Any]], case: str
) -> None:
    wanted = {"above": 3, "zero": 0}[case]
    message = f"min_world_size={wanted} must be in 1..2, the launched world size; leave it out to keep the job whole"
    for rank, out in enumerate(ranks):
        assert out[case]["refused"] == {"message": message, "field": "min_world_size"}, rank
        assert (out[case]["cycles"], _events(out[case], "cycle_started")) == (0, []), rank
        assert out[case]["state"] == "SHUT_DOWN", rank


def test_a_lost_rank_below_min_world_size_ends_the_job_naming_no_cause(lost: dict[str, Any]) -> None:
    """The survivor was interrupted by the wrapper's request: it does not name itself, and nobody
    published a fault, so the message says so."""
    assert lost["exhausted"] == {
        "message": lost["exhausted"]["message"],
        "cycles": 1,
        "rank": None,
        "cause": None,
    }
    message = lost["exhausted"]["message"]
    assert message.startswith("in-process restart gave up: fewer than min_world_size=2 ranks are left ("), message
    assert message.endswith("); the last fault was on not published (a lost rank?)") and "\n" not in message
    [record] = _events(lost, "restarts_exhausted")
    fields = ("cycles", "max_cycles", "min_world_size", "cause_rank", "cause", "reason")
    assert [record[f] for f in fields] == [1, 10, 2, None, None, "min_world_size"]  # the defaults: 10, the world
    assert (lost["last_cause"], lost["state"], lost["alive_after"]) == ({}, "SHUT_DOWN", [False])
