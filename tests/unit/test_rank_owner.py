"""`run_ranks` owns its rank processes: a rank that ends without a result, with any exit status, is
failed at once with what it printed; a user callable past its bound names itself and the state."""

from __future__ import annotations

import os
import sys
import time

import pytest

from lifecycle.launchers.local import RankFailed, bounded, run_ranks


def _rank_one_exits_zero() -> str:
    if os.environ["RANK"] == "1":
        print("licence server unreachable, exiting quietly", file=sys.stderr, flush=True)
        os._exit(0)
    return "done"


def _binder_hangs_on_rank_zero() -> str:
    def bind() -> None:
        time.sleep(3600)

    if os.environ["RANK"] == "0":
        bounded(bind, what="binder mypkg:bind", state="MODEL_BUILT", timeout_s=0.5)()
    return "bound"


def _rank_one_fails_then_rank_zero() -> str:
    if os.environ["RANK"] == "1":
        raise ValueError("bad shape")
    time.sleep(3.0)  # rank 0 fails later, as a peer of a failed rank does
    raise RuntimeError("peer rank 1 is gone")


def test_the_rank_that_failed_first_is_named_not_the_lowest_numbered_one() -> None:
    with pytest.raises(RankFailed) as failed:
        run_ranks(_rank_one_fails_then_rank_zero, 2, timeout_s=600)
    assert str(failed.value).startswith("rank 1 failed: ValueError: bad shape")
    assert failed.value.context["rank"] == 1
    assert failed.value.context["errors"] == {1: "ValueError: bad shape", 0: "RuntimeError: peer rank 1 is gone"}


def _rank_one_exits_124_after_a_lifecycle_line() -> str:
    if os.environ["RANK"] == "1":
        print("lifecycle: 7 library warning(s), 7 distinct, are in the startup log", file=sys.stderr, flush=True)
        os._exit(124)  # as timeout(1) would end it, not the lifecycle's bound
    return "done"


def test_a_rank_that_exits_124_without_overrunning_a_bound_is_named_by_its_exit_status() -> None:
    with pytest.raises(RankFailed) as failed:
        run_ranks(_rank_one_exits_124_after_a_lifecycle_line, 2, timeout_s=600)
    assert failed.value.context["errors"] == {
        1: "exited 124 without a result; it last printed: lifecycle: 7 library warning(s), 7 distinct, are in the "
        "startup log"
    }


def test_a_rank_that_exits_0_without_a_result_fails_with_the_last_line_it_printed() -> None:
    with pytest.raises(RankFailed) as failed:
        run_ranks(_rank_one_exits_zero, 2, timeout_s=600)
    assert failed.value.context["errors"] == {
        1: "exited 0 without a result; it last printed: licence server unreachable, exiting quietly"
    }


def test_a_callable_past_its_bound_ends_its_rank_with_one_line_naming_it_and_the_state() -> None:
    with pytest.raises(RankFailed) as failed:
        run_ranks(_binder_hangs_on_rank_zero, 2, timeout_s=600)
    assert failed.value.context["errors"] == {
        0: "binder mypkg:bind did not return within startup.timeout_s = 0.5 s in MODEL_BUILT; "
        "find what it waits for, or raise startup.timeout_s."
    }
