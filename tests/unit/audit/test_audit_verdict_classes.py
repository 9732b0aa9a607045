"""The verdict's class holds at its edges: a full disk is infrastructure whatever exception carries it
(torch's save raises a RuntimeError, not an OSError), and a deadline that a group's own shorter timeout
decides is config whether the rank logged it as a failed transition or as a `state_timeout`."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_audit_verdict import failing, two_ranks

GROUP = {"name": "DATA_SHARDS", "backend": "cpu:gloo", "size": 2, "timeout_s": 3.0, "created_by": "x:f:1"}
TIMEOUTS = {"configured_s": 600.0, "world_s": 600.0, "store_s": 600.0, "watch_s": 600.0, "groups": [], "corrected": 0}


@pytest.mark.parametrize(
    "error",
    [
        "[enforce fail at inline_container.cc:603] . unexpected pos 64 vs 0: No space left on device",
        "PytorchStreamWriter failed writing file data/0: file write failed: [Errno 28] No space left on device",
    ],
)
def test_a_full_disk_raised_as_a_runtime_error_is_infrastructure_and_restarts(tmp_path: Path, error: str) -> None:
    doc = two_ranks(tmp_path, [failing("build_model", "DISTRIBUTED", "RuntimeError", error)], "build_model")
    assert (doc["class"], doc["action"], doc["culprit"]["rank"]) == ("infrastructure", "RESTART", 1)


def test_a_state_timeout_on_a_rank_whose_group_timeout_is_shorter_than_the_budget_is_config_so_stop(
    tmp_path: Path,
) -> None:
    """The watch's own record (not a failed DistributedError): the same work outlives the same group timeout."""
    timed_out = ("state_timeout", {"state": "MODEL_BUILT", "trigger": "build_model", "timeout_s": 600.0})
    made = [("timeouts_read", TIMEOUTS), ("group_created", GROUP | {"connect_s": 0.01})]
    doc = two_ranks(tmp_path, [*made, timed_out], "build_model")
    assert (doc["class"], doc["action"], doc["culprit"]["rank"], doc["exclude_hosts"]) == ("config", "STOP", 1, [])
    assert any(e.get("rule") == "LA028" for e in doc["evidence"])


def test_a_state_timeout_with_every_group_at_the_budget_stays_infrastructure(tmp_path: Path) -> None:
    timed_out = ("state_timeout", {"state": "MODEL_BUILT", "trigger": "build_model", "timeout_s": 600.0})
    made = [("timeouts_read", TIMEOUTS), ("group_created", GROUP | {"timeout_s": 600.0, "connect_s": 0.01})]
    doc = two_ranks(tmp_path, [*made, timed_out], "build_model")
    assert (doc["class"], doc["action"]) == ("infrastructure", "RESTART")
