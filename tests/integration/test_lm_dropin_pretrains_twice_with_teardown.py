"""`pretrain` twice in one process, on 2 spawned gloo ranks: a second call without `teardown()` is
refused at DISTRIBUTED naming what is still up and that this process's earlier `pretrain` left it
(not "code outside this lifecycle"), and leaves it as it was; after `teardown()` nothing of
Megatron-LM's startup is up and the second call's losses equal the first's, a fresh process's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

from lifecycle.launchers.local import run_ranks
from tests.integration import lm_dropin_group_cases

pytestmark = pytest.mark.slow
LEFT_UP = [
    "the process group",
    "megatron's parallel state",
    "the rerun state machine",
    "the micro-batch calculator",
    "Megatron-LM's global variables",
]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    root: Path = tmp_path_factory.mktemp("twice")
    return run_ranks(lm_dropin_group_cases.twice, 2, str(root), timeout_s=1200)


def test_after_teardown_the_second_pretrain_trains_as_a_fresh_process_does(ranks: list[dict[str, Any]]) -> None:
    for out in ranks:
        assert "error" not in out["second"], out["second"]
        assert len(out["first"]["losses"]) == 5
        assert out["second"]["losses"] == out["first"]["losses"]
        assert out["second"]["result"]["losses"] == out["first"]["losses"]


def test_a_second_pretrain_without_teardown_names_what_is_up_and_who_left_it(ranks: list[dict[str, Any]]) -> None:
    for out in ranks:
        assert out["up_after_first"] == LEFT_UP
        refused = out["refused"]
        assert refused.startswith(
            "DistributedError: " + ", ".join(LEFT_UP) + " still up, left by this process's earlier"
        )
        assert "call lifecycle.lm_dropin.teardown() before calling pretrain again" in refused
        assert "outside this lifecycle" not in refused
        assert out["up_after_refusal"] == LEFT_UP  # the refused call took nothing down


def test_teardown_ends_everything_megatron_lms_startup_left_up(ranks: list[dict[str, Any]]) -> None:
    for out in ranks:
        assert out["teardown"] == [
            "Megatron-LM's global variables",
            "the micro-batch calculator",
            "the rerun state machine",
            "megatron's parallel state",
            "the process group",
        ]
        assert out["up_after_teardown"] == []
        assert out["teardown_second"] == out["teardown"]
