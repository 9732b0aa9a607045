"""The launcher's own evidence (`launch_ended`, one record per node agent): what `lifecycle run` reads
from torchrun's failure report, the record's chain in `launcher-NNNNN.jsonl`, and the verdict it
gives where the ranks' logs cannot say who ended first. Real processes and signals:
tests/integration/test_launcher_verdicts.py."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from audit_logs import Events, clean_events, index
from test_audit_cause import rank_log

from lifecycle.audit import audit, judge
from lifecycle.log import records
from lifecycle.testing import TorchrunReport, follow_verdict, launcher_path, write_launch_ended

T0 = 1_800_000_000.0
REPORT = """\
Traceback (most recent call last):
  File "/x/torch/distributed/run.py", line 1142, in <module>
    main()
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
lifecycle FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2027-01-15_08:00:02
  host      : node-7
  rank      : 2 (local_rank: 2)
  exitcode  : 1 (pid: 4402)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2027-01-15_08:00:01
  host      : node-7
  rank      : 3 (local_rank: 3)
  exitcode  : -9 (pid: 4403)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4403
============================================================
"""
SIGNALLED = """\
W0115 08:00:05.1 77 torch/distributed/elastic/agent/server/api.py:753] Received 15 death signal, shutting down workers
W0115 08:00:05.1 77 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 4400 closing signal SIGTERM
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)
torch.distributed.elastic.multiprocessing.api.SignalException: Process 77 got signal: 15
"""


def read(report: TorchrunReport, text: str) -> str:
    for line in text.splitlines(keepends=True):
        report.line(line)
    return report.out.getvalue()  # type: ignore[attr-defined]  # a StringIO


def test_the_report_gives_each_failed_rank_its_exit_or_signal_the_first_observed_first() -> None:
    report = TorchrunReport(io.StringIO())
    assert read(report, REPORT) == ""  # torchrun's own report is not copied
    ended = report.ended()
    assert [(e["rank"], e["local_rank"], e["exitcode"], e["signal"]) for e in ended] == [
        (3, 3, -9, "SIGKILL"),
        (2, 2, 1, None),
    ]
    assert isinstance(ended[0]["ts"], float) and ended[0]["ts"] < ended[1]["ts"]  # type: ignore[operator]


def test_a_forwarded_signal_leaves_no_torchrun_traceback_and_no_agent_lines() -> None:
    report = TorchrunReport(io.StringIO())
    report.received.append(15)
    assert read(report, "rank 0 says hello\n" + SIGNALLED) == "rank 0 says hello\n"
    assert report.stopped_line("runs/x").startswith("stopped by SIGTERM: torchrun stopped its ranks")
    assert report.ended() == []


def test_another_error_s_traceback_is_still_shown() -> None:
    report = TorchrunReport(io.StringIO())
    text = "Traceback (most recent call last):\n  File 'x.py', line 1\nValueError: mine\n"
    assert read(report, text) == text


def launch_ended(**fields: Any) -> records.LaunchEnded:
    given: dict[str, Any] = {"node_rank": 0, "host": "node-7", "nproc": 4, "exit": 1, "signal": None, "ended": []}
    return records.LaunchEnded(**(given | fields))


def write(log_dir: Path, **fields: Any) -> Path:
    path = write_launch_ended(log_dir, run_id="run-k", node_rank=0, world_size=4, record=launch_ended(**fields))
    assert isinstance(path, Path), path
    return path


def killed(rank: int, signal: str = "SIGKILL", ts: float = T0 + 101.0) -> dict[str, object]:
    return {"rank": rank, "local_rank": rank, "exitcode": -9, "signal": signal, "ts": ts}


def test_the_record_is_chained_typed_and_a_second_launch_continues_its_chain(tmp_path: Path) -> None:
    write(tmp_path, ended=[killed(3)])
    path = write(tmp_path, exit=0)
    assert path == launcher_path(tmp_path, 0) == tmp_path / "launcher-00000.jsonl"
    lines = path.read_bytes().splitlines()
    recs = [orjson.loads(line) for line in lines]
    assert [(r["seq"], r["event"], r["rank"], r["world_size"]) for r in recs] == [
        (0, "launch_ended", 0, 4),
        (1, "launch_ended", 0, 4),
    ]
    assert recs[1]["prev_hash"] == recs[0]["hash"]
    result = audit([str(tmp_path / "launcher-00000.jsonl"), str(rank_log(tmp_path, 0, clean_events(), start=T0))])
    assert [launch.exit for launch in result.launches] == [0] and not result.launch_broken  # the latest launch


def test_a_file_of_someone_else_at_the_launcher_path_is_left_alone(tmp_path: Path) -> None:
    theirs = launcher_path(tmp_path, 0)
    theirs.write_bytes(b"not ours\n")
    said = write_launch_ended(tmp_path, run_id="r", node_rank=0, world_size=1, record=launch_ended())
    assert isinstance(said, str) and "left as it is" in said and theirs.read_bytes() == b"not ours\n"


def trained(steps: int = 3) -> Events:
    ev = clean_events()
    head = ev[: index(ev, "first_step_finalized") + 1]
    return head + [("step_completed", {"step": n, "loss": 1.0, "duration_s": 0.1}) for n in range(2, steps + 1)]


SIGTERM = ("signal_received", {"signal": "SIGTERM", "state": "CALLBACKS_BOUND"})


@pytest.mark.parametrize("follow", [False, True], ids=["audit", "follow"])
def test_the_first_rank_torchrun_saw_killed_is_blamed_though_every_other_log_reads_stopped(
    tmp_path: Path, follow: bool
) -> None:
    """Ranks 2 and 3 both stop with no record of why (rank 3 was SIGTERMed by torchrun, its main thread
    blocked, so its handler never logged); torchrun's report says rank 2 was SIGKILLed first."""
    for rank in range(4):
        tail = [] if rank in (2, 3) else [SIGTERM]
        rank_log(tmp_path, rank, [*trained(), *tail], start=T0, at={len(trained()): T0 + 101.6})
    write(tmp_path, ended=[killed(2)])
    # followed: no rank shut down or failed, so only the launcher's record ends the wait (not the idle timeout)
    started = time.monotonic()
    doc = (
        follow_verdict(tmp_path, poll_s=0.01, idle_timeout_s=60.0) if follow else judge(audit([str(tmp_path)], jobs=1))
    )
    assert time.monotonic() - started < 30.0, "not the idle timeout"
    assert (doc["outcome"], doc["culprit"], doc["class"]) == ("failed", {"rank": 2, "host": "h"}, "infrastructure")
    assert doc["exclude_hosts"] == ["h"] and doc["evidence"][0]["kind"] == "launch_ended"
    assert doc["victims"] == [0, 1, 3]


def test_without_the_launcher_record_two_silent_logs_cannot_say_which_died_first(tmp_path: Path) -> None:
    for rank in range(4):
        tail = [] if rank in (2, 3) else [SIGTERM]
        rank_log(tmp_path, rank, [*trained(), *tail], start=T0, at={len(trained()): T0 + 101.6})
    doc = judge(audit([str(tmp_path)], jobs=1))
    assert doc["culprit"]["rank"] in (2, 3)  # the first log to stop: a guess the launcher record replaces


def launched(events: Events) -> Events:
    """`events` as a rank `lifecycle run` started writes them (its first record says so)."""
    (event, fields), *rest = events
    return [(event, {**fields, "launcher": "lifecycle run"}), *rest]


def test_a_launched_log_that_only_stops_blames_no_rank_while_its_launcher_left_no_record(tmp_path: Path) -> None:
    """`lifecycle run` SIGKILLed: its ranks take SIGTERM by the parent-death signal, and one still
    running (or killed before its handler logged) has a log that only stops. No launcher record:
    nothing proves that rank died, so no culprit and no host excluded."""
    rank_log(tmp_path, 0, launched(trained()), start=T0, world=2)
    rank_log(tmp_path, 1, launched([*trained(), SIGTERM]), start=T0, world=2)
    doc = judge(audit([str(tmp_path)], jobs=1))
    assert (doc["outcome"], doc["unended"], doc["action"]) == ("incomplete", [0], "STOP"), doc
    assert "culprit" not in doc and "exclude_hosts" not in doc
    assert "lifecycle run started them and left no record of its end on h" in str(doc["reason"])


def test_a_launched_log_that_stops_mid_startup_is_no_death_while_its_launcher_left_no_record(tmp_path: Path) -> None:
    rank_log(tmp_path, 0, launched(trained()[:5]), start=T0, world=2)
    rank_log(tmp_path, 1, launched([*trained(), SIGTERM]), start=T0, world=2)
    doc = judge(audit([str(tmp_path)], jobs=1))
    assert (doc["outcome"], doc["unended"]) == ("incomplete", [0]), doc


def test_a_launched_log_that_only_stops_is_judged_by_the_launcher_record_once_it_is_there(tmp_path: Path) -> None:
    rank_log(tmp_path, 0, launched(trained()), start=T0, world=2)
    rank_log(tmp_path, 1, launched([*trained(), SIGTERM]), start=T0, world=2)
    write(tmp_path, host="h", nproc=2, ended=[killed(0)])
    doc = judge(audit([str(tmp_path)], jobs=1))
    assert (doc["outcome"], doc["culprit"]["rank"], doc["exclude_hosts"]) == ("failed", 0, ["h"]), doc


def test_every_launched_rank_signalled_is_stopped_though_the_launcher_left_no_record(tmp_path: Path) -> None:
    for rank in range(2):
        rank_log(tmp_path, rank, launched([*trained(), SIGTERM]), start=T0, world=2)
    doc = judge(audit([str(tmp_path)], jobs=1))
    assert (doc["outcome"], doc["signal"], doc["exclude_hosts"]) == ("stopped", "SIGTERM", []), doc


def test_a_rank_torchrun_saw_sigtermed_first_was_stopped_from_outside(tmp_path: Path) -> None:
    for rank in range(2):
        rank_log(tmp_path, rank, [*trained(), SIGTERM], start=T0, world=2)
    write_launch_ended(
        tmp_path,
        run_id="run-k",
        node_rank=0,
        world_size=2,
        record=launch_ended(nproc=2, ended=[{**killed(1), "exitcode": -15, "signal": "SIGTERM"}]),
    )
    doc = judge(audit([str(tmp_path)], jobs=1))
    assert (doc["outcome"], doc["culprit"]["rank"], doc["signal"], doc["exclude_hosts"]) == (
        "stopped",
        1,
        "SIGTERM",
        [],
    )


@pytest.mark.parametrize("follow", [False, True], ids=["audit", "follow"])
def test_a_launcher_stopped_by_a_signal_is_stopped_naming_it(tmp_path: Path, follow: bool) -> None:
    for rank in range(4):
        rank_log(tmp_path, rank, [*trained(), SIGTERM], start=T0)
    write(tmp_path, signal="SIGTERM", exit=143)
    doc = follow_verdict(tmp_path, poll_s=0.01) if follow else judge(audit([str(tmp_path)], jobs=1))
    assert (doc["outcome"], doc["signal"], doc["action"], doc["exclude_hosts"]) == ("stopped", "SIGTERM", "RESTART", [])
    assert "lifecycle run on node-7" in str(doc["sender"])


def test_a_failure_the_logs_show_is_kept_over_the_launchers_order(tmp_path: Path) -> None:
    refused = (
        "transition_failed",
        {
            "trigger": "build_model",
            "source": "DISTRIBUTED",
            "error_type": "ValueError",
            "error": "x",
            "duration_s": 1.0,
        },
    )
    ev = clean_events()
    head = ev[: index(ev, "transition_started", trigger="build_model") + 1]
    rank_log(tmp_path, 1, [*head, refused], start=T0, world=2)
    rank_log(
        tmp_path, 0, [*head, ("startup_aborted", {"signal": "SIGTERM", "state": "DISTRIBUTED"})], start=T0, world=2
    )
    write_launch_ended(tmp_path, run_id="run-k", node_rank=0, world_size=2, record=launch_ended(ended=[killed(0)]))
    doc = judge(audit([str(tmp_path)], jobs=1))
    assert (doc["culprit"]["rank"], doc["class"]) == (1, "user-code")


def test_an_edited_launcher_record_is_tampered(tmp_path: Path) -> None:
    for rank in range(4):
        rank_log(tmp_path, rank, [*trained(), SIGTERM], start=T0)
    path = write(tmp_path, ended=[killed(2)])
    path.write_bytes(path.read_bytes().replace(b'"rank":2', b'"rank":1'))
    result = audit([str(tmp_path)], jobs=1)
    doc = judge(result)
    assert (doc["outcome"], doc["where"]) == ("tampered", [f"{path}:1"]) and result.exit_code == 1
