"""Failures never wedge the engine: a log that cannot be written, a failed validation, a log
directory of another run, concurrent callers (in-process phases; the real ones are in
tests/integration/test_faults_*.py)."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from lifecycle import ConfigError, GuardRejected, InProcessPhases, Lifecycle, PhaseFailed, RunConfig
from lifecycle.audit import audit
from lifecycle.log import records
from lifecycle.testing import check_log, read_log
from states import State


def stderr_records(text: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in text.splitlines() if line.startswith("{")]


def disk_full_after(monkeypatch: pytest.MonkeyPatch, writes: int) -> None:
    """The log file's writes fail with ENOSPC after `writes` of them (stderr still works): os.write,
    which the log writer calls, fails for `.jsonl` files as on a full disk."""
    real, count = os.write, [0]

    def write(fd: int, data: Any) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".jsonl"):
            count[0] += 1
            if count[0] > writes:
                raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


def test_a_log_that_fills_during_startup_fails_the_lifecycle_and_shutdown_still_releases(
    make_lc: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lc = make_lc()
    lc.advance_to(State.SERVICES_READY)
    disk_full_after(monkeypatch, 0)
    with pytest.raises(PhaseFailed, match="cannot be written .*No space left.* call shutdown"):
        lc.advance_to(State.CALLBACKS_BOUND)
    assert lc.state is State.FAILED and lc.log_fault is not None
    assert not lc.runtime.distributed, "work the log could not record was not started"
    lc.shutdown()
    assert lc.state is State.SHUT_DOWN
    on_stderr = stderr_records(capfd.readouterr().err)
    events = [r["event"] for r in on_stderr]
    assert events[:2] == ["transition_started", "log_write_failed"]
    assert "lifecycle_shutdown" in events
    shut = next(r for r in on_stderr if r["event"] == "lifecycle_shutdown")
    assert shut["unlogged"] >= len(on_stderr) - 2 and shut["lost"] == 0
    assert check_log(read_log(lc.log_path) + on_stderr) == [], "file + stderr are one unbroken chain"
    joined = tmp_path / "joined" / "rank-00000.jsonl"
    joined.parent.mkdir()
    joined.write_bytes(lc.log_path.read_bytes() + b"".join(orjson.dumps(r) + b"\n" for r in on_stderr))
    assert {f.rule for f in audit([str(joined.parent)]).findings} == {"LA013", "LA018"}, "startup failed, chain whole"


def test_a_users_own_record_call_never_raises_for_the_log_but_the_lifecycle_fails(
    make_lc: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    lc = make_lc()
    lc.advance_to(State.CALLBACKS_BOUND)
    disk_full_after(monkeypatch, 0)
    lc.record(records.StepCompleted(step=1, loss=1.0, duration_s=0.1))
    assert lc.state is State.FAILED
    err = capfd.readouterr().err
    said = [line for line in err.splitlines() if not line.startswith("{")]
    assert len(said) == 1 and "the lifecycle is FAILED and training goes on unlogged" in said[0], err  # at once
    lc.shutdown()
    assert lc.state is State.SHUT_DOWN
    assert "log_write_failed" in err


def test_no_space_at_validate_leaves_no_empty_rank_file_and_the_records_on_stderr(
    make_lc: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    disk_full_after(monkeypatch, 0)
    lc = make_lc(log_dir=tmp_path / "full")
    with pytest.raises(PhaseFailed):
        lc.validate()
    assert lc.state is State.FAILED
    assert not (tmp_path / "full" / "rank-00000.jsonl").exists(), "an empty rank file would audit clean"
    events = [r["event"] for r in stderr_records(capfd.readouterr().err)]
    assert events[0] == "lifecycle_started" and "log_write_failed" in events and "transition_failed" in events


def test_a_validation_failure_is_logged_and_the_error_says_the_way_out(make_lc: Any, tmp_path: Path) -> None:
    lc = make_lc(phases=InProcessPhases(fail_on="validate"))
    with pytest.raises(PhaseFailed, match="create a new Lifecycle"):
        lc.validate()
    records = read_log(tmp_path / "logs" / "rank-00000.jsonl")
    failed = [r for r in records if r["event"] == "transition_failed"]
    assert failed and failed[0]["trigger"] == "validate" and "injected" in failed[0]["error"]
    assert records[-1]["dest"] == "FAILED"
    with pytest.raises(GuardRejected, match="create a new Lifecycle"):
        lc.restart()


def test_a_validation_failure_on_rank_1_under_torchrun_leaves_its_rank_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    lc = Lifecycle(RunConfig(), log_dir=tmp_path, phases=InProcessPhases(fail_on="validate"), tripwires="off")
    with pytest.raises(PhaseFailed):
        lc.validate()
    lc.shutdown()
    records = read_log(tmp_path / "rank-00001.jsonl")
    assert [r["event"] for r in records if r["event"] == "transition_failed"] == ["transition_failed"]
    assert records[-1]["event"] == "transition_completed" and records[-1]["dest"] == "SHUT_DOWN"


def test_a_log_dir_that_cannot_be_used_sends_the_records_to_stderr_and_says_so(
    make_lc: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    lc = make_lc(log_dir=blocker)
    with pytest.raises(ConfigError, match="went to stderr as JSON lines") as info:
        lc.validate()
    assert info.value.field == "logging.log_dir"
    events = [r["event"] for r in stderr_records(capfd.readouterr().err)]
    assert events[0] == "lifecycle_started" and "transition_failed" in events


def run_once(log_dir: Path, run_id: str, existing: str = "refuse", *, rank: int = 0) -> Lifecycle:
    config = RunConfig.from_dict({"logging": {"existing": existing}})
    lc = Lifecycle(config, log_dir=log_dir, phases=InProcessPhases(), tripwires="off", run_id=run_id)
    try:
        lc.advance_to(State.CALLBACKS_BOUND)
    finally:
        lc.shutdown()
    return lc


def test_a_log_dir_holding_another_run_is_refused_naming_that_run_and_the_choices(tmp_path: Path) -> None:
    run_once(tmp_path, "run-old")
    with pytest.raises(ConfigError, match="another run, 'run-old'.*overwrite.*--overwrite.*append") as info:
        run_once(tmp_path, "run-new")
    assert info.value.field == "logging.existing"
    assert read_log(tmp_path / "rank-00000.jsonl")[0]["run_id"] == "run-old", "the old logs are untouched"


def test_overwrite_replaces_the_old_runs_logs_and_the_audit_is_clean(tmp_path: Path) -> None:
    run_once(tmp_path, "run-old", rank=0)
    (tmp_path / "rank-00003.jsonl").write_bytes((tmp_path / "rank-00000.jsonl").read_bytes())
    run_once(tmp_path, "run-new", "overwrite")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lifecycle.lock", "rank-00000.jsonl"]
    assert {r["run_id"] for r in read_log(tmp_path / "rank-00000.jsonl")} == {"run-new"}
    assert not audit([str(tmp_path)]).findings


def test_the_same_run_coming_back_appends_a_new_attempt_that_the_audit_understands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    crashed = Lifecycle(RunConfig(), log_dir=tmp_path, phases=InProcessPhases(), tripwires="off", run_id="job")
    crashed.advance_to(State.DISTRIBUTED)  # then the process "dies": no shutdown record
    with open(tmp_path / "rank-00000.jsonl", "ab") as handle:
        handle.write(b'{"event":"transition_sta')  # killed mid-record
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")  # torchrun restarted the worker
    run_once(tmp_path, "job")
    records = read_log(tmp_path / "rank-00000.jsonl")
    starts = [r for r in records if r["event"] == "lifecycle_started"]
    assert [r.get("attempt") for r in starts] == [None, 1]
    assert starts[1]["restart_count"] == 1
    assert check_log(records[: records.index(starts[1])]) == []
    assert not audit([str(tmp_path)]).findings, "one chain, judged by its latest attempt"


def test_concurrent_advance_to_from_eight_threads_all_get_the_runtime_and_one_startup(make_lc: Any) -> None:
    lc = make_lc()
    results: list[Any] = []
    barrier = threading.Barrier(8)

    def advance() -> None:
        barrier.wait()
        try:
            results.append(lc.advance_to(State.CALLBACKS_BOUND))
        except Exception as exc:
            results.append(exc)

    threads = [threading.Thread(target=advance) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(r is lc.runtime for r in results), results
    assert [r["trigger"] for r in lc.records if r["event"] == "transition_completed"].count("validate") == 1
    assert not [r for r in lc.records if r["event"] == "invalid_transition"]
