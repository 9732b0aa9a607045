"""One run owns a log directory at a time, and the lock that says so is ours or refused: its file is
one line naming the holder (rewritten whole by each claim), readable by every user, never followed
through a link; a holder whose line cannot be read is still refused in one line. The directory's
owner (`LogDir`) asks the file system once and opens the log once, after its listeners. Real files
and real `flock`s: a lock held through a second descriptor conflicts as another process's would."""

from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from lifecycle import ConfigError, InProcessPhases, Lifecycle, RunConfig
from lifecycle.log import AuditLog, LogDir

LOCK = ".lifecycle.lock"


def lifecycle(log_dir: Path, run_id: str, existing: str = "refuse") -> Lifecycle:
    config = RunConfig.from_dict({"logging": {"existing": existing}})
    return Lifecycle(config, log_dir=log_dir, phases=InProcessPhases(), tripwires="off", run_id=run_id)


def refusal(log_dir: Path) -> str:
    lc = lifecycle(log_dir, "run-late")
    try:
        with pytest.raises(ConfigError) as info:
            lc.validate()
    finally:
        lc.shutdown()
    assert info.value.field == "logging.log_dir"
    return str(info.value)


@pytest.fixture
def held(tmp_path: Path) -> Iterator[Path]:
    """A log directory whose lock file another holder has open with a shared `flock`."""
    (tmp_path / LOCK).write_bytes(b"\xff\xfe not the line a run writes")
    fd = os.open(tmp_path / LOCK, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_SH)
    yield tmp_path
    os.close(fd)


def test_a_claim_rewrites_the_lock_file_whole_so_a_longer_old_holder_leaves_no_tail(tmp_path: Path) -> None:
    first = lifecycle(tmp_path, "run-with-a-much-longer-identifier-than-the-next-" + "x" * 64)
    first.validate()
    first.shutdown()  # the lock ends with it; its line stays in the file
    second = lifecycle(tmp_path, "run-2", "overwrite")
    second.validate()
    try:
        line = (tmp_path / LOCK).read_bytes()
        assert orjson.loads(line) == {"run_id": "run-2", "host": socket.gethostname(), "pid": os.getpid()}
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert f"is in use by run 'run-2' on host {socket.gethostname()!r}" in refusal(tmp_path)
    finally:
        second.shutdown()


def test_a_holder_whose_lock_line_cannot_be_read_is_still_refused_in_one_line(held: Path) -> None:
    said = refusal(held)
    assert f"log_dir {str(held)!r} is in use by run None on host None" in said
    assert "\n" not in said and "Traceback" not in said


def test_a_lock_file_that_is_a_symbolic_link_is_refused_and_what_it_points_to_is_untouched(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"precious")
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    (log_dir / LOCK).symlink_to(outside)
    said = refusal(log_dir)
    assert f"{LOCK} cannot be opened (" in said and "remove it" in said
    assert outside.read_bytes() == b"precious" and (log_dir / LOCK).is_symlink()


def test_the_lock_file_is_readable_by_every_user_and_writable_by_its_owner_only(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        lc = lifecycle(tmp_path, "run-mode")
        lc.validate()
        lc.shutdown()
    finally:
        os.umask(old)
    assert (tmp_path / LOCK).stat().st_mode & 0o777 == 0o644  # who holds a directory is no secret


def test_the_owner_asks_the_file_system_once_and_keeps_its_answer(tmp_path: Path) -> None:
    owner = LogDir(tmp_path / "logs")
    assert owner.problem() is None
    (tmp_path / "logs").symlink_to(tmp_path)  # changed after the check: the answer stands (one check a rank)
    assert owner.problem() is None
    assert "is a symbolic link" in (LogDir(tmp_path / "logs").problem() or "")


def test_the_log_opens_once_after_the_listeners_that_must_see_it_closed(tmp_path: Path) -> None:
    owner = LogDir(tmp_path)
    log = AuditLog(run_id="run-open", rank=0, world_size=1)
    seen: list[bool] = []
    owner.before_open(lambda given: seen.append(given is log and not given.is_open))
    try:
        assert owner.open(log) == tmp_path / "rank-00000.jsonl"
        assert owner.open(log) is None, "an open log is not opened again"
        assert seen == [True], "each listener saw the log once, before it opened"
    finally:
        log.close()
        log.release()
