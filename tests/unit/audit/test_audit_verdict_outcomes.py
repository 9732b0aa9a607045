"""The verdict's outcome is proved, never assumed: `clean` only when every rank of the declared world
has its own clean closing record, every chain verifies and no finding stands; everything else is
named (`failed`, `stopped`, `incomplete`, `tampered`, `unreadable`, `flagged`), and the exit status of
`lifecycle audit --format verdict` follows the outcome. Logs written by the real AuditLog."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from audit_logs import Events, clean_events, index, rechain
from test_audit_cause import rank_log

from lifecycle.audit import VERDICT_EXIT
from lifecycle.cli import main
from lifecycle.testing import follow_verdict

T0 = 1_800_000_000.0
SIGTERM = ("signal_received", {"signal": "SIGTERM", "state": "CALLBACKS_BOUND"})


def trained(steps: int = 3) -> Events:
    """A startup to CALLBACKS_BOUND and `steps` steps, no shutdown: a rank still training, or killed."""
    ev = clean_events()
    head = ev[: index(ev, "first_step_finalized") + 1]
    return head + [("step_completed", {"step": n, "loss": 1.0, "duration_s": 0.1}) for n in range(2, steps + 1)]


def judged(log_dir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    """`lifecycle audit --format verdict DIR`: its exit status and its document."""
    code = main(["audit", "--format", "verdict", str(log_dir)])
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1, out
    doc = json.loads(out[0])
    assert code == VERDICT_EXIT[doc["outcome"]], (code, doc)  # the exit status never disagrees
    return code, doc


def clean_world(log_dir: Path, world: int) -> list[Path]:
    return [rank_log(log_dir, r, clean_events(), start=T0, world=world) for r in range(world)]


def test_a_clean_world_is_clean_with_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clean_world(tmp_path, 2)
    assert judged(tmp_path, capsys) == (0, {"verdict": 1, "outcome": "clean", "findings": 0, "ranks": 2})


def test_a_rank_killed_while_training_is_blamed_when_the_launcher_stopped_the_others_before_they_named_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGKILL on rank 3 (the OOM killer): its log stops; torchrun SIGTERMs the others 0.6 s later, before
    their rank watch names it. It was "clean" with four LA021 findings."""
    for rank in range(4):
        if rank == 3:
            rank_log(tmp_path, 3, trained(), start=T0)
        else:
            rank_log(tmp_path, rank, [*trained(), SIGTERM], start=T0, at={len(trained()): T0 + 100.6})
    code, doc = judged(tmp_path, capsys)
    assert (code, doc["outcome"], doc["culprit"]) == (1, "failed", {"rank": 3, "host": "h"})
    assert (doc["class"], doc["action"], doc["exclude_hosts"]) == ("infrastructure", "RESTART", ["h"])
    assert doc["state"] == "CALLBACKS_BOUND" and doc["victims"] == [0, 1, 2]


def test_every_rank_stopped_by_a_signal_after_the_startup_is_stopped_not_clean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for rank in range(2):
        rank_log(tmp_path, rank, [*trained(), SIGTERM], start=T0, world=2, at={len(trained()): T0 + 100.0 + rank})
    code, doc = judged(tmp_path, capsys)
    assert (code, doc["outcome"], doc["signal"], doc["culprit"]["rank"]) == (1, "stopped", "SIGTERM", 0)
    assert (doc["action"], doc["exclude_hosts"]) == ("RESTART", [])


def test_a_clean_shutdown_after_a_signal_is_a_stop_not_a_clean_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C while training: KeyboardInterrupt, then the lifecycle shuts down cleanly; the training did not end."""
    ev = clean_events()
    at = index(ev, "lifecycle_shutdown")
    rank_log(tmp_path, 0, [*ev[:at], ("signal_received", {"signal": "SIGINT", "state": "CALLBACKS_BOUND"}), *ev[at:]],
             start=T0, world=1)  # fmt: skip
    assert judged(tmp_path, capsys)[1]["outcome"] == "stopped"


def test_a_world_with_a_rank_log_missing_is_incomplete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clean_world(tmp_path, 3)
    (tmp_path / "rank-00002.jsonl").unlink()
    code, doc = judged(tmp_path, capsys)
    assert (code, doc["outcome"], doc["missing"], doc["action"]) == (1, "incomplete", [2], "STOP")
    assert "exclude_hosts" not in doc and "culprit" not in doc


@pytest.mark.parametrize("cut", [1, 2, 5], ids=["transition_completed", "lifecycle_shutdown", "steps"])
def test_a_log_whose_last_records_are_gone_is_never_clean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cut: int
) -> None:
    """Records deleted from the end keep the chain whole: only the missing clean end shows it."""
    paths = clean_world(tmp_path, 2)
    lines = paths[1].read_bytes().splitlines(keepends=True)
    paths[1].write_bytes(b"".join(lines[:-cut]))
    code, doc = judged(tmp_path, capsys)
    assert code == 1 and doc["outcome"] in ("incomplete", "failed"), doc
    assert doc.get("culprit", {}).get("rank", 1) == 1


def test_a_record_edited_in_place_is_tampered_naming_the_line_and_blaming_no_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = clean_world(tmp_path, 2)
    lines = paths[0].read_bytes().splitlines(keepends=True)
    lines[3] = (
        lines[3].replace(b'"ts":', b'"ts":1', 1) if b'"ts":1' not in lines[3] else lines[3].replace(b"1", b"2", 1)
    )
    paths[0].write_bytes(b"".join(lines))
    code, doc = judged(tmp_path, capsys)
    assert (code, doc["outcome"], doc["where"]) == (1, "tampered", [f"{paths[0]}:4"])
    assert doc["action"] == "STOP" and "culprit" not in doc and "exclude_hosts" not in doc


def test_a_record_deleted_in_the_middle_is_tampered(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = clean_world(tmp_path, 2)
    lines = paths[1].read_bytes().splitlines(keepends=True)
    paths[1].write_bytes(b"".join(lines[:5] + lines[6:]))
    assert judged(tmp_path, capsys)[1]["where"] == [f"{paths[1]}:6"]


@pytest.mark.parametrize(
    "bad",
    [{"seq": "3"}, {"event": "no_such_event"}, {"event": None}],
    ids=["seq-a-string", "unknown-event", "null-event"],
)
def test_one_malformed_record_is_unreadable_with_exit_2_naming_it_and_no_death_or_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: dict[str, Any]
) -> None:
    """It read "the rank died", RESTART, its host excluded, with exit status 2."""
    paths = clean_world(tmp_path, 2)
    rechain(paths[1], lambda recs: recs[4].update(bad))
    code, doc = judged(tmp_path, capsys)
    assert (code, doc["outcome"], doc["where"]) == (2, "unreadable", [f"{paths[1]}:5"])
    assert "culprit" not in doc and "exclude_hosts" not in doc and doc["action"] == "STOP"


def test_ranks_that_ended_cleanly_with_a_rule_violated_are_flagged_not_clean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ev = clean_events()
    bound = index(ev, "callbacks_bound")
    ev[bound] = ("callbacks_bound", {**ev[bound][1], "target_id": "0x99"})  # not the config the scheduler reads
    rank_log(tmp_path, 0, ev, start=T0, world=1)
    code, doc = judged(tmp_path, capsys)
    assert (code, doc["outcome"], doc["action"]) == (1, "flagged", "STOP") and "LA003" in doc["rules"]


def test_following_a_malformed_record_is_unreadable_too(tmp_path: Path) -> None:
    paths = clean_world(tmp_path, 2)
    rechain(paths[1], lambda recs: recs[4].update({"seq": "3"}))
    doc = follow_verdict(tmp_path, poll_s=0.01, idle_timeout_s=0.05)
    assert (doc["outcome"], doc["where"]) == ("unreadable", [f"{paths[1]}:5"])


@pytest.mark.parametrize("stopped", [False, True], ids=["clean", "stopped"])
def test_following_exits_as_the_outcome_says(tmp_path: Path, capsys: pytest.CaptureFixture[str], stopped: bool) -> None:
    """--follow exited 0 for anything but `failed`: a job stopped from outside read as success."""
    for rank in range(2):
        ev = [*trained(), SIGTERM] if stopped else clean_events()
        rank_log(tmp_path, rank, ev, start=T0, world=2)
    code = main(["audit", "--format", "verdict", "--follow", str(tmp_path), "--idle-timeout", "0.05"])
    doc = json.loads(capsys.readouterr().out)
    assert (code, doc["outcome"]) == ((1, "stopped") if stopped else (0, "clean"))
