"""In-process restart on nvidia-resiliency-ext (2 gloo ranks, real megatron-core, one spawned group):
rank 1 raises at step 3 of 6 after a checkpoint at step 2, every rank restarts in place and the
result equals an uninterrupted run exactly; five restarts in one process leak nothing; a release
that misses something raises ResourceLeak naming it. Skipped, with the reason, where
nvidia-resiliency-ext is not installed or cannot sit beside this megatron-core."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lifecycle.audit import audit
from lifecycle.launchers.local import run_ranks
from lifecycle.testing import attempts, diff, installed_problem, leaked, text

PROBLEM = installed_problem()
if PROBLEM is not None:
    print(f"tests/integration/test_restart.py skipped: {PROBLEM}")
    pytest.skip(PROBLEM, allow_module_level=True)

LEDGER = {
    "DISTRIBUTED:process group",
    "DISTRIBUTED:megatron parallel state",
    "DISTRIBUTED:RNG tracker states",
    "DISTRIBUTED:rank watch thread",
    "DISTRIBUTED:process group objects (their gloo sockets)",
    "MODEL_BUILT:model chunk 0 (DDP grad hooks, forward pre-hooks)",
    "MODEL_BUILT:optimizer",
    "CALLBACKS_BOUND:bound callbacks",
    "CALLBACKS_BOUND:dataloader and checkpoint worker threads",
    "CALLBACKS_BOUND:dataloader and checkpoint worker processes",
}
"""What the ledger must hold at CALLBACKS_BOUND under the restart wrapper (the CPU rehearsal is the
wrapper's, once per process, so not a cycle's). Removing any entry from the ledger fails a test."""


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    from tests.integration.restart_cases import restart_group

    root = tmp_path_factory.mktemp("restart")
    result: list[dict[str, Any]] = run_ranks(restart_group, 2, str(root), timeout_s=900)
    return result


def _log_records(log_dir: str) -> list[dict[str, Any]]:
    import orjson

    return [
        orjson.loads(line)
        for path in sorted(Path(log_dir).glob("rank-*.jsonl"))
        for line in path.read_bytes().splitlines()
    ]


def test_in_process_restart_equals_no_restart(cases: list[dict[str, Any]]) -> None:
    for rank, case in enumerate(cases):
        plain, restart = case["plain"], case["restart"]
        assert [s for s, _ in plain["losses"]] == [1, 2, 3, 4, 5, 6], rank
        assert (restart["cycles"], restart["start"]) == (2, 2), rank  # restarted once, resumed from step 2
        assert restart["losses"] == plain["losses"][2:], rank  # exactly, not approximately
        assert restart["weights"] == plain["weights"], rank
    steps = [
        (r["rank"], r["cycle"], r["step"])
        for r in _log_records(cases[0]["restart"]["log_dir"])
        if r["event"] == "step_completed"
    ]
    assert [(c, s) for rank, c, s in steps if rank == 1] == [(0, 1), (0, 2), (0, 3), (1, 3), (1, 4), (1, 5), (1, 6)]


def test_the_audit_names_rank_1_as_the_cause_of_cycle_0_and_cycle_1_is_clean(cases: list[dict[str, Any]]) -> None:
    result = audit([cases[0]["restart"]["log_dir"]], jobs=1)
    assert result.exit_code == 0, result.findings
    found = attempts(result.ranks)
    assert [(a.cycle, a.ended, a.cause_rank, a.ranks) for a in found] == [
        (0, True, 1, (0, 1)),
        (1, False, None, (0, 1)),
    ]
    assert found[0].cause is not None and "injected fault at step 3 in cycle 0" in found[0].cause
    assert found[1].restart_s is not None and 0 < found[1].restart_s < 120 and found[1].resumed_step == 2
    ended = [r for r in _log_records(cases[0]["restart"]["log_dir"]) if r["event"] == "cycle_ended"]
    assert sorted((r["rank"], r["cycle"], r["cause_rank"]) for r in ended) == [(0, 0, 1), (1, 0, 1)]
    assert diff(result.ranks, 0, 1) == ["cycles 0 and 1: no difference"]


def test_a_restart_storm_ends_in_restarts_exhausted_and_one_line_naming_the_fault(cases: list[dict[str, Any]]) -> None:
    fault = "rank 1: RuntimeError: injected fault at step 1 in cycle 1"
    for rank, case in enumerate(cases):
        assert case["storm"]["cycles"] == 2, rank
        assert case["storm"]["error"] == (
            f"in-process restart gave up: all 2 cycles (max_cycles=2) failed; the last fault was on {fault}"
        ), rank
    records = _log_records(cases[0]["storm"]["log_dir"])
    exhausted = sorted(
        (r["rank"], r["cycle"], r["cycles"], r["reason"], r["cause_rank"], r["cause"])
        for r in records
        if r["event"] == "restarts_exhausted"
    )
    cause = "RuntimeError: injected fault at step 1 in cycle 1"
    assert exhausted == [(0, 1, 2, "max_cycles", 1, cause), (1, 1, 2, "max_cycles", 1, cause)]


def test_a_min_world_size_above_the_launched_world_size_is_refused_before_the_first_cycle(
    cases: list[dict[str, Any]],
) -> None:
    for rank, case in enumerate(cases):
        assert case["min_world_size_3"] == (
            "min_world_size=3 must be in 1..2, the launched world size; leave it out to keep the job whole"
        ), rank


def test_five_in_process_restarts_leak_nothing(cases: list[dict[str, Any]]) -> None:
    for rank, case in enumerate(cases):
        leaks = case["leaks"]
        assert leaks["cycles"] == 6 and leaks["weights"] == case["plain"]["weights"], rank
        first, *later = leaks["per_cycle"][:5]  # at step 1 of cycles 0..4, just before the fault
        assert first["forward_pre_hooks"] + first["callbacks"] + first["process_groups"] > 0
        for cycle, counts in enumerate(later, 1):
            # hooks, callbacks, process groups, ledger entries, threads, child processes (the
            # dataloader worker of each cycle's training): exactly the first cycle's;
            # descriptors: at most one or two more than the first cycle's at any one moment (the
            # wrapper's and the aborted groups' sockets close asynchronously: measured 122 then
            # 123 on one rank; before the heap was frozen 207, 192, 128, ...), and no growth over
            # the cycles (a leak of even one descriptor per cycle adds 3 between cycles 1 and 4)
            assert {k: v for k, v in counts.items() if k != "fds"} == {k: v for k, v in first.items() if k != "fds"}, (
                rank,
                cycle,
            )
            assert counts["fds"] <= first["fds"] + 2, (rank, cycle, counts, first)
        assert later[-1]["fds"] <= later[0]["fds"] + 1, (rank, [c["fds"] for c in [first, *later]])
    records = _log_records(cases[0]["leaks"]["log_dir"])
    assert leaked(records) == []
    soft = 3 * next(r["configured_s"] for r in records if r["event"] == "timeouts_read")  # 3 × startup.timeout_s
    wrapper = {"soft_s": soft, "hard_s": 2 * soft, "barrier_s": 3 * soft, "completion_s": 3 * soft}
    for record in (r for r in records if r["event"] == "cycle_started"):
        assert set(record["ledger"]) == LEDGER, record["ledger"]
        # the wrapper's own timeouts, read back from it, as docs/restart.md derives them; our own client's
        # to its store read back from the client: nvidia-resiliency-ext's TCPStore's default, 300 s
        heartbeat = min(2 * soft, 30.0)
        assert record["restart_timeouts"] == wrapper | {"heartbeat_s": heartbeat, "store_client_s": 300.0}, record
    result = audit([cases[0]["leaks"]["log_dir"]], jobs=1)
    assert [a.cause_rank for a in attempts(result.ranks)] == [1, 1, 1, 1, 1, None]
    assert f"in-process restart wrapper: soft {soft:g} s, hard {2 * soft:g} s" in text(result)
    assert f"heartbeat {min(2 * soft, 30.0):g} s, store client 300 s" in text(result)


@pytest.mark.parametrize(
    ("case", "resource", "state"),
    [
        ("sabotage_rng", "RNG tracker states", "DISTRIBUTED"),
        ("sabotage_model", "model chunk 0 (DDP grad hooks, forward pre-hooks)", "MODEL_BUILT"),
        ("sabotage_workers", "dataloader and checkpoint worker processes", "CALLBACKS_BOUND"),
        ("sabotage_group", "process group objects (their gloo sockets)", "DISTRIBUTED"),
    ],
)
def test_a_release_that_misses_a_resource_raises_resource_leak(
    cases: list[dict[str, Any]], case: str, resource: str, state: str
) -> None:
    for result in (c[case] for c in cases):
        assert (result["error"]["type"], result["error"]["resource"], result["error"]["state"]) == (
            "ResourceLeak",
            resource,
            state,
        ), result["error"]
        assert (state, resource) in {tuple(found) for found in result["leaked"]}


def test_faults_during_restarts_are_each_named_by_the_next_cycle_and_every_rank_meets_again(
    cases: list[dict[str, Any]],
) -> None:
    """After rank 1's fault in training, its restart() raises in its release (cycle 1), then its
    SERVICES_READY raises (cycle 2): each time the wrapper restarts every rank again, and the cycle's
    end names rank 1 and the error (not an unnamed fault or a deadline), and cycle 3 finishes.
    - Rank 0 was restarted out of cycle 1 still at VALIDATED, so it made one restart fewer than
      rank 1: the ranks still meet in cycle 2 (keyed by their generations, they waited for each
      other until the deadline, every cycle).
    - Rank 0 waited in DISTRIBUTED's check-in for rank 1 in cycle 2 and took the wrapper's restart
      request there at once (waiting in one store call, it took it at `startup.timeout_s`, 30 s)."""
    for rank, case in enumerate(cases):
        assert (case["release"]["cycles"], case["release"]["start"]) == (4, 2), rank
        assert case["release"]["weights"] == case["plain"]["weights"], rank
    records = _log_records(cases[0]["release"]["log_dir"])
    ended = {(r["rank"], r["cycle"]): r for r in records if r["event"] == "cycle_ended"}
    for rank in (0, 1):
        for cycle, error in enumerate(
            ("injected fault at step 3", "injected release fault in restart", "injected SERVICES_READY fault")
        ):
            assert ended[(rank, cycle)]["cause_rank"] == 1 and error in ended[(rank, cycle)]["cause"], ended
    assert (ended[(0, 1)]["state"], ended[(1, 1)]["state"]) == ("VALIDATED", "FAILED")
    assert (ended[(0, 2)]["generation"], ended[(1, 2)]["generation"]) == (1, 2)  # and they met in cycle 2
    in_cycle_2 = [r for r in records if r["rank"] == 0 and r["cycle"] == 2 and r["event"] == "transition_failed"]
    assert [r["trigger"] for r in in_cycle_2] == ["init_distributed"], in_cycle_2
    assert ended[(0, 2)]["ts"] - ended[(0, 2)]["fault_ts"] < 10, ended[(0, 2)]  # not the 30 s deadline
