"""The log directory is ours or refused: a symlink or a file that is not one of our logs under a rank
file's name is refused at VALIDATED and never truncated, rewritten, removed or followed; `overwrite`
removes only checked logs; two runs (two real processes) cannot own one directory at once."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lifecycle import ConfigError, InProcessPhases, Lifecycle, RunConfig
from lifecycle.audit import audit
from lifecycle.testing import check_log, read_log
from states import State

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = b"precious line 1\nprecious line 2 without newline"


def start(log_dir: Path, run_id: str, existing: str = "refuse", *, world_size: int = 1) -> Lifecycle:
    config = RunConfig.from_dict({"logging": {"existing": existing}})
    lc = Lifecycle(config, log_dir=log_dir, phases=InProcessPhases(), tripwires="off", run_id=run_id)
    try:
        lc.advance_to(State.CALLBACKS_BOUND)
    finally:
        lc.shutdown()
    return lc


def refused(log_dir: Path, existing: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        start(log_dir, "run-new", existing)
    return info.value


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside.txt"
    path.write_bytes(OUTSIDE)
    return path


@pytest.mark.parametrize("existing", ["refuse", "append", "overwrite"])
def test_a_rank_file_that_is_a_symlink_is_refused_by_name_and_its_target_is_untouched(
    tmp_path: Path, outside: Path, existing: str
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank-00000.jsonl").symlink_to(outside)
    error = refused(logs, existing)
    assert error.field == "logging.log_dir"
    assert "rank-00000.jsonl is a symbolic link" in str(error) and "choose another log directory" in str(error)
    assert outside.read_bytes() == OUTSIDE and (logs / "rank-00000.jsonl").is_symlink()


@pytest.mark.parametrize("existing", ["refuse", "overwrite"])
def test_a_dangling_symlink_creates_nothing_where_it_points(tmp_path: Path, existing: str) -> None:
    logs, target = tmp_path / "logs", tmp_path / "elsewhere.jsonl"
    logs.mkdir()
    (logs / "rank-00000.jsonl").symlink_to(target)
    assert "symbolic link" in str(refused(logs, existing))
    assert not target.exists()


@pytest.mark.parametrize(
    "content",
    [
        OUTSIDE,
        b"[1, 2]\n",
        b'{"event": "transition_started"}\n',
        b"\xff\xfe\x00garbage",
        b'{"event":"lifecycle_started"}\n',
        b"\n",
    ],
)
@pytest.mark.parametrize("existing", ["refuse", "append", "overwrite"])
def test_a_rank_file_that_is_not_a_startup_log_is_refused_in_one_line_and_kept_byte_for_byte(
    tmp_path: Path, content: bytes, existing: str
) -> None:
    (tmp_path / "rank-00000.jsonl").write_bytes(content)
    error = refused(tmp_path, existing)
    assert "rank-00000.jsonl" in str(error) and "not one of our startup logs" in str(error)
    assert len(str(error).splitlines()) == 1
    assert (tmp_path / "rank-00000.jsonl").read_bytes() == content


@pytest.mark.parametrize("existing", ["refuse", "append"])
def test_a_startup_log_that_does_not_end_in_a_chained_record_is_never_continued(tmp_path: Path, existing: str) -> None:
    content = b'{"event":"lifecycle_started","run_id":"run-new"}\n{"no": "chain"}\n'
    (tmp_path / "rank-00000.jsonl").write_bytes(content)
    assert "does not end with a hash-chained record" in str(refused(tmp_path, existing))
    assert (tmp_path / "rank-00000.jsonl").read_bytes() == content
    start(tmp_path, "run-new", "overwrite")  # a startup log by its first line: overwrite may replace it
    assert {r["run_id"] for r in read_log(tmp_path / "rank-00000.jsonl")} == {"run-new"}


def test_a_hard_link_to_an_outside_file_is_refused(tmp_path: Path, outside: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    os.link(outside, logs / "rank-00000.jsonl")
    assert "hard links" in str(refused(logs, "overwrite"))
    assert outside.read_bytes() == OUTSIDE


def test_overwrite_removes_exactly_the_checked_logs_of_ranks_this_run_lacks(tmp_path: Path, outside: Path) -> None:
    logs = tmp_path / "logs"
    start(logs, "run-old")
    ours = (logs / "rank-00000.jsonl").read_bytes()
    (logs / "rank-00003.jsonl").write_bytes(ours)
    (logs / "rank-00004.jsonl").write_bytes(b"")
    (logs / "rank-00005.jsonl").write_bytes(OUTSIDE)
    (logs / "rank-00007.jsonl").symlink_to(outside)
    (logs / "notes.txt").write_bytes(b"mine")
    before = set(os.listdir(logs))
    start(logs, "run-new", "overwrite")
    assert before - set(os.listdir(logs)) == {"rank-00003.jsonl", "rank-00004.jsonl"}
    assert (logs / "rank-00005.jsonl").read_bytes() == OUTSIDE and (logs / "rank-00007.jsonl").is_symlink()
    assert outside.read_bytes() == OUTSIDE and (logs / "notes.txt").read_bytes() == b"mine"
    assert {r["run_id"] for r in read_log(logs / "rank-00000.jsonl")} == {"run-new"}


def test_a_continued_log_is_cut_only_at_its_own_torn_last_line(tmp_path: Path) -> None:
    start(tmp_path, "job")
    with open(tmp_path / "rank-00000.jsonl", "ab") as handle:
        handle.write(b'{"event":"transition_sta')
    start(tmp_path, "job")
    records = read_log(tmp_path / "rank-00000.jsonl")
    assert check_log(records[: [r["event"] for r in records].index("lifecycle_started", 1)]) == []
    assert not audit([str(tmp_path)]).findings, "one chain: the torn line was cut, nothing else"
    assert [r.get("attempt") for r in records if r["event"] == "lifecycle_started"] == [None, 1]


def test_a_log_whose_only_line_was_left_unfinished_starts_again_from_the_chains_head(tmp_path: Path) -> None:
    start(tmp_path, "job")
    path = tmp_path / "rank-00000.jsonl"
    path.write_bytes(path.read_bytes().split(b"\n")[0])  # the first record, its newline never written
    start(tmp_path, "job", "append")
    assert check_log(read_log(path)) == [] and read_log(path)[0]["seq"] == 0
    assert not audit([str(tmp_path)]).findings, "the unfinished line was cut, and no record refers to it"


def test_a_log_dir_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    error = refused(tmp_path / "link", "refuse")
    assert error.field == "logging.log_dir" and "is a symbolic link" in str(error)
    assert os.listdir(real) == []


HOLDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from lifecycle import InProcessPhases, Lifecycle, RunConfig
    from states import State
    config = RunConfig.from_dict({"logging": {"existing": sys.argv[2]}})
    lc = Lifecycle(config, log_dir=Path(sys.argv[1]), phases=InProcessPhases(), tripwires="off", run_id="run-first")
    lc.advance_to(State.CALLBACKS_BOUND)
    print("holding", flush=True)
    sys.stdin.readline()
    lc.shutdown()
    print("released", flush=True)
""")


@pytest.mark.parametrize("existing", ["refuse", "overwrite"])
def test_a_second_run_is_refused_while_another_process_owns_the_log_dir_naming_its_run_and_host(
    tmp_path: Path, existing: str
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path), existing],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout is not None and first.stdin is not None
        assert first.stdout.readline().strip() == "holding"
        written = (tmp_path / "rank-00000.jsonl").read_bytes()
        error = refused(tmp_path, existing)
        assert error.field == "logging.log_dir"
        assert "in use by run 'run-first'" in str(error) and f"host {socket.gethostname()!r}" in str(error)
        assert (tmp_path / "rank-00000.jsonl").read_bytes().startswith(written), "the first run's log is intact"
        first.stdin.write("\n")
        first.stdin.flush()
        assert first.stdout.readline().strip() == "released"
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0
    start(tmp_path, "run-new", "overwrite")  # the lock ended with the first run
    assert {r["run_id"] for r in read_log(tmp_path / "rank-00000.jsonl")} == {"run-new"}


def test_ranks_of_one_run_share_the_log_dir(tmp_path: Path) -> None:
    one = Lifecycle(RunConfig(), log_dir=tmp_path, phases=InProcessPhases(), tripwires="off", run_id="same")
    two = Lifecycle(RunConfig(), log_dir=tmp_path, phases=InProcessPhases(), tripwires="off", run_id="same")
    try:
        one.validate()
        two._shared.log.rebind(rank=1)  # a second rank of the same run, in its own lifecycle
        two.validate()
        assert (tmp_path / "rank-00001.jsonl").is_file()
    finally:
        one.shutdown()
        two.shutdown()
