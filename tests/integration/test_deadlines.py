"""A dead, missing or failed rank never hangs the job: deadlines, check-in and failure broadcast.

Real 2-rank gloo jobs without a launcher agent (RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set
by hand, as srun and mpirun do), run by `benchmarks/faults.py`, one job at a time. Then the watch's
check-in and heartbeat on a real TCPStore in this process (no megatron import).
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from benchmarks.faults import LINGER_S, CaseResult, run_case
from benchmarks.verdicts import wrong
from lifecycle import RunConfig
from lifecycle.audit import audit, verdict
from lifecycle.errors import DistributedError
from lifecycle.rankwatch import EXIT_CODE, Failure, RankWatch, WatchSettings
from states import Trigger
from tests.phase_context import RecordingContext

pytestmark = pytest.mark.slow

# The CPU is shared: a torch + megatron interpreter takes seconds to tear down after the lifecycle
# has finished (measured up to ~7 s on a loaded 2-core machine). The lifecycle's own bound is
# asserted on its last log record; the process exit gets this allowance on top.
TEARDOWN_S = 20.0


def assert_verdict(tmp_path: Path, result: CaseResult) -> None:
    """The supervisor's verdict on the case's logs is the fault corpus's (benchmarks/verdicts.py)."""
    found = audit([str(tmp_path / result.case)], jobs=1)
    doc = verdict(found.root_causes, found.ranks, found.findings)
    assert wrong(result.case, doc) == [], doc


def _last_record_after_fault(result: CaseResult, rank: int) -> float:
    return float(result.records[rank][-1]["ts"]) - result.fault_at


def _exit_after_fault(result: CaseResult, rank: int) -> float:
    return result.exit_at[rank] - result.fault_at


NEVER_S = 8.0
"""The deadline of the cases where a rank never starts: the rank that did waits all of it (the
rendezvous starts after its imports, so a slow machine does not eat into it)."""


def test_rank_0_names_the_missing_rank_when_rank_1_never_starts(tmp_path: Path) -> None:
    result = run_case("never_starts", NEVER_S, tmp_path)
    assert_verdict(tmp_path, result)
    timeouts = result.events(0, "state_timeout")
    assert [(t["state"], t["trigger"], t["timeout_s"], t["missing"]) for t in timeouts] == [
        ("DISTRIBUTED", "init_distributed", NEVER_S, [1])
    ]
    assert "rendezvous timed out after 8 s: 1 of 2 ranks arrived; missing: rank 1" in result.stderr[0]
    assert result.returncode[0] == 1
    assert [r["event"] for r in result.records[0]][-1] == "transition_completed"  # shut down, in order
    assert _last_record_after_fault(result, 0) <= NEVER_S + 10.0
    assert _exit_after_fault(result, 0) <= NEVER_S + 10.0 + TEARDOWN_S


def test_rank_1_names_rank_0_when_the_store_host_never_starts(tmp_path: Path) -> None:
    result = run_case("rank_0_never_starts", NEVER_S, tmp_path)
    assert_verdict(tmp_path, result)
    timeouts = result.events(1, "state_timeout")
    assert [(t["state"], t["missing"]) for t in timeouts] == [("DISTRIBUTED", [0])]
    assert "rendezvous timed out after 8 s: could not reach the store" in result.stderr[1]
    assert "missing: rank 0" in result.stderr[1]
    assert result.returncode == {1: 1}
    assert _last_record_after_fault(result, 1) <= NEVER_S + 10.0


@pytest.mark.release_independent
def test_rank_0_fails_with_peer_failed_naming_rank_1_when_rank_1_raises_in_model_built(tmp_path: Path) -> None:
    result = run_case("raise_in_model_built", 600.0, tmp_path)
    assert_verdict(tmp_path, result)
    peer = result.events(0, "peer_failed")
    assert [(p["peer_rank"], p["peer_state"]) for p in peer] == [(1, "MODEL_BUILT")]
    assert "injected fault" in peer[0]["error"]
    failed = result.events(0, "transition_failed")
    assert failed[0]["trigger"] == "build_model" and "rank 1 failed in MODEL_BUILT" in failed[0]["error"]
    assert result.events(1, "peer_failed") == []  # the cause is not a victim
    assert result.events(1, "transition_failed")[0]["error"] == "injected fault: the provider failed on rank 1"
    assert result.returncode == {0: 1, 1: 1}
    assert _last_record_after_fault(result, 0) <= 10.0
    assert _exit_after_fault(result, 0) <= 10.0 + TEARDOWN_S


@pytest.mark.release_independent
def test_the_watcher_ends_rank_0_when_the_failed_rank_1_keeps_its_process_group(tmp_path: Path) -> None:
    """Rank 1 fails and keeps its process group for a while: rank 0's collective cannot raise, so the
    watcher logs `peer_failed` and ends the process (gloo cannot abort a collective in flight)."""
    result = run_case("raise_and_linger", 600.0, tmp_path)
    assert_verdict(tmp_path, result)
    assert [(p["peer_rank"], p["peer_state"]) for p in result.events(0, "peer_failed")] == [(1, "MODEL_BUILT")]
    assert result.returncode[0] == EXIT_CODE
    assert _exit_after_fault(result, 0) <= 10.0
    assert _exit_after_fault(result, 1) >= LINGER_S  # rank 0 did not wait for rank 1 to let go


@pytest.mark.release_independent
def test_a_sigterm_on_rank_1_in_model_built_is_broadcast_and_rank_0_names_it(tmp_path: Path) -> None:
    result = run_case("sigterm_in_model_built", 600.0, tmp_path)
    assert_verdict(tmp_path, result)
    peer = result.events(0, "peer_failed")
    assert [(p["peer_rank"], p["peer_state"]) for p in peer] == [(1, "MODEL_BUILT")]
    assert peer[0]["error"].startswith("StartupAborted: startup aborted by SIGTERM"), peer[0]["error"]
    # rank 0 gets control back when rank 1's sockets close (exit 1) or, on a loaded machine where that
    # takes longer than the grace after its watcher saw the failure, the watcher ends it (exit 75):
    # either way it names rank 1 and does not wait
    assert result.returncode[1] == 143 and result.returncode[0] in (1, EXIT_CODE), result.returncode
    assert _last_record_after_fault(result, 0) <= 10.0
    assert _exit_after_fault(result, 0) <= 10.0 + TEARDOWN_S


@pytest.mark.release_independent
def test_rank_0_exits_within_the_deadline_when_rank_1_is_sigkilled_in_distributed(tmp_path: Path) -> None:
    result = run_case("kill_in_distributed", 20.0, tmp_path)
    assert_verdict(tmp_path, result)
    assert result.returncode[1] == -9
    assert result.returncode[0] != 0
    assert _exit_after_fault(result, 0) <= 20.0
    peer = result.events(0, "peer_failed")
    assert [(p["peer_rank"], p["peer_state"]) for p in peer] == [(1, "DISTRIBUTED")]
    assert "is gone without a failure record" in peer[0]["error"]  # its pid, seen from the same host


@pytest.mark.release_independent
def test_rank_0_names_rank_1_sigkilled_in_model_built_instead_of_blaming_itself(tmp_path: Path) -> None:
    result = run_case("kill_in_model_built", 20.0, tmp_path)
    assert_verdict(tmp_path, result)
    assert result.returncode[1] == -9
    peer = result.events(0, "peer_failed")
    assert [(p["peer_rank"], p["peer_state"]) for p in peer] == [(1, "MODEL_BUILT")]
    assert "is gone without a failure record" in peer[0]["error"]
    assert result.returncode[0] == 1  # it got control back and shut down in order
    assert _last_record_after_fault(result, 0) <= 20.0
    assert _exit_after_fault(result, 0) <= 20.0 + TEARDOWN_S


# -- after startup: a fault at training step 2 ------------------------------------------------------
def _steps_done(result: CaseResult, rank: int) -> list[int]:
    return [r["step"] for r in result.events(rank, "step_completed")]


@pytest.mark.release_independent
def test_a_raise_at_step_2_ends_both_ranks_and_the_failed_rank_does_not_wait_in_its_shutdown(tmp_path: Path) -> None:
    result = run_case("raise_at_step_2", 600.0, tmp_path)
    assert_verdict(tmp_path, result)
    assert _steps_done(result, 0) == [1] and _steps_done(result, 1) == [1]
    assert [(p["peer_rank"], p["peer_state"]) for p in result.events(0, "peer_failed")] == [(1, "CALLBACKS_BOUND")]
    assert "injected fault: rank 1 failed at step 2" in result.events(0, "peer_failed")[0]["error"]
    assert result.events(1, "peer_failed") == []
    for rank in (0, 1):  # both shut down in order, well inside the 600 s deadline
        assert result.records[rank][-1]["dest"] == "SHUT_DOWN"
        assert _last_record_after_fault(result, rank) <= 10.0
        assert _exit_after_fault(result, rank) <= 10.0 + TEARDOWN_S
    assert result.returncode == {0: 1, 1: 1}


def test_a_sigkill_at_step_2_is_named_by_the_survivor_which_shuts_down(tmp_path: Path) -> None:
    result = run_case("kill_at_step_2", 600.0, tmp_path)
    assert_verdict(tmp_path, result)
    peer = result.events(0, "peer_failed")
    assert [(p["peer_rank"], p["peer_state"], p["error"].split(" (")[0]) for p in peer] == [
        (1, "CALLBACKS_BOUND", "its process")
    ]
    assert result.returncode == {0: 1, 1: -9}
    assert _last_record_after_fault(result, 0) <= 10.0


def test_killing_rank_0_the_store_host_at_step_2_is_named_live_by_rank_1(tmp_path: Path) -> None:
    result = run_case("kill_rank_0_at_step_2", 600.0, tmp_path)
    assert_verdict(tmp_path, result)
    peer = result.events(1, "peer_failed")
    assert [p["peer_rank"] for p in peer] == [0] and "gone" in peer[0]["error"], peer
    assert result.returncode == {0: -9, 1: 1}
    assert result.records[1][-1]["dest"] == "SHUT_DOWN"
    assert _last_record_after_fault(result, 1) <= 10.0
    assert _exit_after_fault(result, 1) <= 10.0 + TEARDOWN_S


@pytest.mark.release_independent
def test_a_rank_stopped_at_step_2_is_declared_lost_by_its_heartbeat_and_the_other_ends(tmp_path: Path) -> None:
    result = run_case("stop_at_step_2", 600.0, tmp_path)
    assert_verdict(tmp_path, result)
    peer = result.events(0, "peer_failed")
    assert [(p["peer_rank"], p["peer_state"]) for p in peer] == [(1, "CALLBACKS_BOUND")]
    assert "stood still" in peer[0]["error"]  # its watcher's beat on the node's board
    assert peer[0]["peer_kind"] == "lost"  # a follower of the logs gives its verdict without waiting for rank 1's
    assert result.returncode[0] == EXIT_CODE  # blocked in an all-reduce with a live, silent peer
    assert _exit_after_fault(result, 0) <= 8.0 + 1.0 + 10.0  # stale_s + the lost grace, under load


# -- the watch on a real TCPStore, in this process ------------------------------------------------
def _store(world_size: int) -> Any:
    import torch.distributed as dist

    from lifecycle.launchers.local import free_port

    return dist.TCPStore("127.0.0.1", free_port(), world_size, is_master=True, wait_for_workers=False)


def _ctx(timeout_s: float) -> RecordingContext:
    config = RunConfig.preset("tiny-gpt", [f"startup.timeout_s={timeout_s}"])
    return RecordingContext.for_config(config, trigger=Trigger.INIT_DISTRIBUTED)


@pytest.mark.parametrize("interruptible", [False, True])
def test_check_in_times_out_naming_every_rank_that_did_not_arrive(interruptible: bool) -> None:
    store, ctx = _store(4), _ctx(1.0)
    RankWatch(store, rank=2, world_size=4, settings=WatchSettings(timeout_s=1.0)).store.set("checkin/2", b"1")
    watch = RankWatch(store, rank=0, world_size=4, settings=WatchSettings(timeout_s=1.0), interruptible=interruptible)
    started = time.monotonic()
    with pytest.raises(DistributedError, match=r"after 1 s: 2 of 4 ranks arrived; missing: ranks 1, 3\."):
        watch.check_in(ctx)
    assert time.monotonic() - started < 5
    assert ctx.emitted == [
        ("state_timeout", {"state": "DISTRIBUTED", "trigger": "init_distributed", "timeout_s": 1.0, "missing": [1, 3]})
    ]
    first = watch.first_failure()
    assert first is not None and (first.rank, first.kind) == (0, "timeout")


class _RestartRequest(BaseException):
    """What an in-process restart wrapper raises into the main thread (nvidia-resiliency-ext's
    RankShouldRestart, by `PyThreadState_SetAsyncExc`: it lands between bytecodes)."""


def _request_restart(thread_id: int, after_s: float) -> threading.Thread:
    import ctypes

    def request() -> None:
        time.sleep(after_s)
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(_RestartRequest))

    thread = threading.Thread(target=request)
    thread.start()
    return thread


def test_under_a_restart_wrapper_the_check_in_takes_the_restart_request_long_before_the_deadline() -> None:
    """A peer failed before it checked in (its release, SERVICES_READY): the wrapper restarts every
    rank. Waiting in one store call, the request landed only at the deadline (600 s by default)."""
    store, ctx = _store(2), _ctx(20.0)
    watch = RankWatch(store, rank=0, world_size=2, settings=WatchSettings(timeout_s=20.0), interruptible=True)
    requester = _request_restart(threading.get_ident(), 0.3)
    started = time.monotonic()
    with pytest.raises(_RestartRequest):
        watch.check_in(ctx)
    waited = time.monotonic() - started
    requester.join()
    assert waited < 10, waited  # not the 20 s deadline
    assert ctx.emitted == []  # no state_timeout: nothing timed out


@pytest.mark.parametrize("interruptible", [False, True])
def test_the_check_in_ends_when_the_last_rank_arrives(interruptible: bool) -> None:
    import torch.distributed as dist

    store, ctx = _store(2), _ctx(20.0)
    watch = RankWatch(store, rank=0, world_size=2, settings=WatchSettings(timeout_s=20.0), interruptible=interruptible)
    other = dist.TCPStore("127.0.0.1", store.port, 2, is_master=False)  # rank 1's own connection
    late = threading.Timer(
        0.3, RankWatch(other, rank=1, world_size=2, settings=WatchSettings(timeout_s=20.0)).check_in, [_ctx(20.0)]
    )
    late.start()
    started = time.monotonic()
    watch.check_in(ctx)
    waited = time.monotonic() - started
    late.join()
    assert watch.checkin.missing() == [] and waited < 10 and ctx.emitted == []


def test_a_failure_inside_a_watched_state_is_published_once_and_the_first_one_wins() -> None:
    store, ctx = _store(2), _ctx(600.0)
    rank1 = RankWatch(store, rank=1, world_size=2, settings=WatchSettings(timeout_s=600.0))
    with pytest.raises(ValueError, match="boom"), rank1.phase(ctx, "MODEL_BUILT"):
        raise ValueError("boom")
    rank1.publish(Failure(rank=1, state="CALLBACKS_BOUND", error="later", kind="exception"))
    rank0 = RankWatch(store, rank=0, world_size=2, settings=WatchSettings(timeout_s=600.0))
    assert rank0.peer_failure() == Failure(rank=1, state="MODEL_BUILT", error="ValueError: boom", kind="exception")
    assert rank1.failed and rank1.peer_failure() is None


def test_a_node_whose_heartbeat_stops_is_published_lost_by_the_node_before_it_which_ends_its_blocked_state(
    tmp_path: Path,
) -> None:
    """Rank 1, alone on node b, checked in and then never beat again (its node lost): node a's leader,
    which watches node b in the ring, names it after `stale_s`, on a real TCPStore."""
    import torch.distributed as dist

    store, ctx = _store(2), _ctx(20.0)
    exits: list[int] = []
    other = dist.TCPStore("127.0.0.1", store.port, 2, is_master=False)
    RankWatch(
        other, rank=1, world_size=2, settings=WatchSettings(timeout_s=20.0), node="b", board_dir=str(tmp_path)
    ).checkin.register()

    def connect() -> dist.TCPStore:
        return dist.TCPStore("127.0.0.1", store.port, 2, is_master=False)

    watch = RankWatch(
        store,
        rank=0,
        world_size=2,
        settings=WatchSettings(timeout_s=20.0, poll_s=0.1, grace_s=0.5),
        exit_process=exits.append,
        node="a",
        board_dir=str(tmp_path),
        watcher_store=connect,
    )
    watch.check_in(ctx)
    watch.start()
    blocked = threading.Event()
    with watch.phase(ctx, "DISTRIBUTED"):
        deadline = time.monotonic() + watch.stale_s + 10
        while not exits and time.monotonic() < deadline:
            blocked.wait(0.1)
    watch.stop()
    assert exits == [EXIT_CODE]
    assert ctx.emitted[0][0] == "peer_failed"
    assert (ctx.emitted[0][1]["peer_rank"], ctx.emitted[0][1]["peer_state"]) == (1, "DISTRIBUTED")
    assert "its node b sent no heartbeat" in ctx.emitted[0][1]["error"]
    assert store.get("beat/2") == b"done"  # node a (index 2: node b checked in first)


def test_a_collective_state_that_runs_out_of_time_logs_state_timeout_and_fails_naming_the_setting() -> None:
    store, ctx = _store(2), _ctx(0.5)
    watch = RankWatch(store, rank=0, world_size=2, settings=WatchSettings(timeout_s=0.5))
    expected = r"MODEL_BUILT timed out after 0.5 s on rank 0 .*startup.timeout_s"
    with pytest.raises(DistributedError, match=expected), watch.phase(ctx, "MODEL_BUILT"):
        store.wait(["a key no rank sets"], timedelta(seconds=0.5))  # torch's own timeout
    assert ctx.emitted == [("state_timeout", {"state": "MODEL_BUILT", "trigger": "init_distributed", "timeout_s": 0.5})]
    first = watch.first_failure()
    assert first is not None and (first.rank, first.state, first.kind) == (0, "MODEL_BUILT", "timeout")


def test_the_watcher_ends_a_state_still_running_past_its_deadline() -> None:
    store, ctx = _store(2), _ctx(1.0)
    exits: list[int] = []
    watch = RankWatch(
        store,
        rank=1,
        world_size=2,
        settings=WatchSettings(timeout_s=1.0, poll_s=0.1, grace_s=0.5),
        exit_process=exits.append,
    )
    watch.store.add("alive/1", 1)
    watch.start()
    with watch.phase(ctx, "CALLBACKS_BOUND"):
        deadline = time.monotonic() + 10
        while not exits and time.monotonic() < deadline:  # work that blocks outside any collective
            time.sleep(0.05)
    watch.stop()
    assert exits == [EXIT_CODE]
    assert ctx.emitted == [
        ("state_timeout", {"state": "CALLBACKS_BOUND", "trigger": "init_distributed", "timeout_s": 1.0})
    ]
    first = watch.first_failure()
    assert first is not None and (first.rank, first.kind) == (1, "timeout")
