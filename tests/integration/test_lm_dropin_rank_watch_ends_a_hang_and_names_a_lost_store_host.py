"""The drop-in's rank watch on launched ranks (the example script, gloo on CPU): a DISTRIBUTED that
hangs after the process group is up (Megatron-LM's dataset-helper build waiting on a file system) is
ended at the deadline, Megatron-LM's `--distributed-timeout-minutes`, with `state_timeout` and exit
status 75, a lone rank saying why on stderr (no launcher reports it), as is a lone rank's MODEL_BUILT
that hangs (the model's work runs under the watch too); and when rank 0, which hosts
the process group's store, dies in the watch's check-in, the rank left waiting there names it.
Launched ranks (~20-40 s each: megatron's import in each, then the deadline)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

from lifecycle.errors import RankFailed
from lifecycle.launchers.local import run_ranks
from lifecycle.rankwatch import EXIT_CODE
from tests.integration import lm_dropin_watch_cases as cases

pytestmark = pytest.mark.slow

HANG_S = 25.0
"""How long DISTRIBUTED's step hangs: well past the deadline (6 s) and the grace (3 s), under load."""


def _records(logs: Path, rank: int, event: str) -> list[dict[str, Any]]:
    lines = (logs / f"rank-{rank:05d}.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["event"] == event]


def _timed_out(logs: Path, rank: int) -> list[tuple[str, str, float]]:
    return [(r["state"], r["trigger"], r["timeout_s"]) for r in _records(logs, rank, "state_timeout")]


def test_a_lone_rank_hanging_in_distributed_is_ended_at_the_deadline_saying_why_on_stderr(tmp_path: Path) -> None:
    with pytest.raises(RankFailed) as failed:
        run_ranks(cases.hang_in_distributed, 1, str(tmp_path), HANG_S, timeout_s=300)
    assert failed.value.errors[0].startswith(f"exited {EXIT_CODE} without a result"), failed.value.errors
    printed = failed.value.output[0]
    assert "lifecycle: a startup state did not end within startup.timeout_s = 6 s" in printed, printed[-2000:]
    assert _timed_out(tmp_path, 0) == [("DISTRIBUTED", "init_distributed", 6.0)]


def test_a_lone_rank_hanging_in_model_built_is_ended_at_the_deadline(tmp_path: Path) -> None:
    with pytest.raises(RankFailed) as failed:
        run_ranks(cases.hang_in_model_built, 1, str(tmp_path), HANG_S, timeout_s=300)
    assert failed.value.errors[0].startswith(f"exited {EXIT_CODE} without a result"), failed.value.errors
    assert _timed_out(tmp_path, 0) == [("MODEL_BUILT", "build_model", 6.0)]


def test_the_store_hosts_loss_in_the_check_in_is_named_by_the_rank_left_waiting(tmp_path: Path) -> None:
    with pytest.raises(RankFailed) as failed:
        run_ranks(cases.kill_store_host_in_check_in, 2, str(tmp_path), timeout_s=300)
    errors = failed.value.errors
    assert errors[0].startswith("was killed by SIGKILL"), errors
    assert "rank 0, the rendezvous store's host, was lost while rank 1 waited for every rank" in errors[1], errors
    [peer] = _records(tmp_path, 1, "peer_failed")
    assert (peer["peer_rank"], peer["peer_kind"]) == (0, "lost"), peer


def test_ranks_hanging_in_distributed_are_each_ended_at_the_deadline(tmp_path: Path) -> None:
    with pytest.raises(RankFailed) as failed:
        run_ranks(cases.hang_in_distributed, 2, str(tmp_path), HANG_S, timeout_s=300)
    errors = failed.value.errors
    assert [errors.get(rank, "").split(" without")[0] for rank in (0, 1)] == [f"exited {EXIT_CODE}"] * 2, errors
    for rank in (0, 1):
        assert _timed_out(tmp_path, rank) == [("DISTRIBUTED", "init_distributed", 6.0)], rank
