"""A script that made its own process group before `pretrain` (`init_process_group('gloo')` and a
barrier, as launchers and notebooks do), on 2 spawned gloo ranks: Megatron-LM's `pretrain` trains on
it, and so does the drop-in's, with the same losses; the drop-in records the group as adopted and
never destroys it: the group is the same object and usable after `pretrain` returns, after
`teardown()`, and after a `pretrain` that failed at its first step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

from lifecycle.launchers.local import run_ranks
from lifecycle.testing import leaked
from tests.integration import lm_dropin_group_cases

pytestmark = pytest.mark.slow
USABLE = {"initialized": True, "same": True, "sum": 3.0}  # ranks 0 and 1 all-reduce 1 + 2


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], Path]:
    root = tmp_path_factory.mktemp("own-group")
    return run_ranks(lm_dropin_group_cases.own_group, 2, str(root), timeout_s=1200), root


def records(log_dir: Path, rank: int) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (log_dir / f"rank-{rank:05d}.jsonl").read_text().splitlines()]


def test_the_drop_in_trains_on_the_scripts_group_with_megatron_lms_losses(ranks: Any) -> None:
    for out in ranks[0]:
        assert "error" not in out["lifecycle"], out["lifecycle"]
        assert len(out["megatron"]["losses"]) == 5
        assert out["lifecycle"]["losses"] == out["megatron"]["losses"]
        assert out["again"]["losses"] == out["megatron"]["losses"]  # after the failed call too


def test_the_group_is_recorded_as_adopted_with_what_was_read_back_from_it(ranks: Any) -> None:
    _, root = ranks
    for rank in (0, 1):
        recs = records(root / "first", rank)
        adopted = [r for r in recs if r["event"] == "process_group_adopted"]
        assert [(r["backend"], r["world_size"], r["rank"], r["timeout_s"]) for r in adopted] == [
            ("gloo", 2, rank, 1800.0)  # the script's: gloo's default 30 minutes, not startup.timeout_s
        ]
        effects = {r["kind"] for r in recs if r["event"] == "side_effect"}
        assert "process_group" not in effects and "parallel_state" in effects
        assert leaked(recs) == []


def test_the_scripts_group_stays_usable_after_return_teardown_and_failure(ranks: Any) -> None:
    for out in ranks[0]:
        assert out["after_return"] == USABLE
        assert out["after_teardown"] == USABLE
        assert "the process group" not in out["teardown"]  # teardown leaves the script's group
        assert "the script's forward step fails on every rank" in out["failed"]["error"]  # its own, or a peer's named
        assert out["after_failure"] == USABLE
        assert out["after_again"] == USABLE


def test_a_failed_pretrain_on_the_scripts_group_releases_everything_else(ranks: Any) -> None:
    all_ranks, root = ranks
    for rank, out in enumerate(all_ranks):
        assert out["left_after_failure"] == [  # the script's: its group, what its parse_and_validate_args set
            "the process group (the script's, adopted)",
            "the micro-batch calculator",
            "Megatron-LM's global variables",
        ]
        assert leaked(records(root / "failed", rank)) == []


def test_lifecycle_audit_is_clean_for_a_run_on_the_scripts_group(ranks: Any) -> None:
    _, root = ranks
    done = subprocess.run(
        [sys.executable, "-m", "lifecycle", "audit", str(root / "first")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "clean" in done.stdout
    # the timeout map holds the script's group, read back: gloo's 30 minutes, not startup.timeout_s
    assert "startup.timeout_s=unread; world (the script's, adopted) 1800 s" in done.stdout, done.stdout
