import os

import pytest

from lifecycle.launchers.local import RankFailed, run_ranks


def _whoami(tag: str) -> tuple[str, int, int]:
    return tag, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def _fails_on_rank_one() -> None:
    if os.environ["RANK"] == "1":
        raise ValueError("boom")


def test_run_ranks_returns_each_ranks_result_in_rank_order() -> None:
    assert run_ranks(_whoami, 2, "x") == [("x", 0, 2), ("x", 1, 2)]


def test_a_failing_rank_is_reported_with_its_traceback() -> None:
    with pytest.raises(RankFailed, match="rank 1 failed: ValueError: boom"):
        run_ranks(_fails_on_rank_one, 2)
