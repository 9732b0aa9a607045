"""The boards and meetings a node's killed ranks leave in `<tmp>/megatron-lifecycle-<uid>` are removed by
the next rank to lead a startup on that node (lifecycle/rankwatch/_sweep.py), and nothing else is: not a
directory whose owner may be alive, not another user's, not what the lifecycle did not make. Real
processes make them with the rank watch's own classes and are killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from lifecycle.testing import JUDGE_MAX, LIST_MAX, Board, Meeting, board_root, owner, sweep
from tests.unit.test_rank_watch_meeting import met
from tests.unit.test_rank_watch_nodes import dead_pid, job
from tests.unit.test_rank_watch_verdicts import MemoryStore

ROOT = Path(__file__).resolve().parents[2]
MACHINE = owner().split(":", 2)[2]  # where this process's pids mean something

_RANK = """
import sys, time
from lifecycle.testing import Board, Meeting, board_root
root, rank, boards = board_root(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
Meeting(root, "0123456789abcdef01234567", rank, 2)
for n in range(boards):
    Board(root, f"{n:016x}", rank)
print("ready", flush=True)
time.sleep(600)
"""


@contextmanager
def ranks(board_dir: Path, count: int = 2, boards: int = 1) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`count` rank processes, each at one meeting and on `boards` boards under `board_dir`, running."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RANK, str(board_dir), str(r), str(boards)], env=env, stdout=subprocess.PIPE
        )
        for r in range(count)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def killed(board_dir: Path, count: int = 2, boards: int = 1) -> Path:
    """The root after a job of `count` ranks on `boards` boards was SIGKILLed whole (and reaped)."""
    with ranks(board_dir, count, boards) as procs:
        for proc in procs:
            os.kill(proc.pid, signal.SIGKILL)
    return board_root(str(board_dir))


def names(root: Path) -> set[str]:
    return set(os.listdir(root))


LEFT = {"checkin-0123456789abcdef01234567", "0000000000000000"}


def test_a_node_whose_ranks_were_all_killed_is_swept_by_the_next_meetings_leader(tmp_path: Path) -> None:
    root = killed(tmp_path)
    assert names(root) == LEFT
    assert sorted(os.listdir(root / "0000000000000000")) == ["beat-0", "beat-1"]

    w = met(MemoryStore(), tmp_path, {"a": [0, 1]})  # a new job on the node: its meeting's leader sweeps

    assert not names(root) & LEFT
    board = w[1]._node.board
    assert board is not None and board.path.exists() and names(root) == {board.path.name}


def test_without_a_meeting_the_nodes_leader_sweeps_when_it_joins(tmp_path: Path) -> None:
    root = killed(tmp_path)

    w = job(MemoryStore(), tmp_path, {"a": [0, 1]})

    board = w[0]._node.board
    assert board is not None and names(root) == {board.path.name}


def test_a_directory_whose_owner_still_runs_is_kept_until_it_is_killed(tmp_path: Path) -> None:
    with ranks(tmp_path) as procs:
        root = board_root(str(tmp_path))
        os.kill(procs[1].pid, signal.SIGKILL)  # one rank of the two killed: the other still owns both
        procs[1].wait()
        assert sweep(root) == 0 and names(root) == LEFT
        os.kill(procs[0].pid, signal.SIGKILL)  # the last one killed, not reaped yet: a zombie is gone
        while Path(f"/proc/{procs[0].pid}/stat").read_text().split(") ")[1][0] != "Z":
            time.sleep(0.01)
        assert sweep(root) == 2 and names(root) == set()


def test_a_stopped_rank_still_owns_its_directories(tmp_path: Path) -> None:
    """SIGSTOP (or a scheduler's suspend): the process exists, so it may run again."""
    with ranks(tmp_path, count=1) as procs:
        os.kill(procs[0].pid, signal.SIGSTOP)
        root = board_root(str(tmp_path))
        assert sweep(root) == 0 and names(root) == LEFT


def test_a_pid_reused_by_a_later_process_keeps_no_leftover(tmp_path: Path) -> None:
    root = killed(tmp_path, count=1)
    beat = root / "0000000000000000" / "beat-0"
    state, record = beat.read_text().splitlines()
    _, start, machine = record.split(":")
    beat.write_text(f"{state}\n{os.getpid()}:{start}:{machine}\n")  # its pid is now this test's, started earlier

    assert sweep(root) == 2 and names(root) == set()


def test_an_owner_on_another_machine_or_pid_namespace_is_never_judged_gone(tmp_path: Path) -> None:
    root = killed(tmp_path, count=1)
    beat = root / "0000000000000000" / "beat-0"
    state, record = beat.read_text().splitlines()
    pid, start, _ = record.split(":")
    beat.write_text(f"{state}\n{pid}:{start}:0b2c5e1a-other-boot/4026531836\n")  # a board_dir on a shared disk

    assert sweep(root) == 1 and names(root) == {"0000000000000000"}  # the meeting went, the board stays


def test_what_the_lifecycle_did_not_make_is_never_touched(tmp_path: Path) -> None:
    root = killed(tmp_path, count=1, boards=6)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "beat-0").write_text(f"DISTRIBUTED\n{dead_pid()}::{MACHINE}\n")
    (root / "0000000000000000" / "notes.txt").write_text("mine")  # a foreign file in a board
    (root / "0000000000000001" / "first").symlink_to(outside / "beat-0")  # a link in a board
    (root / "0000000000000002").rename(root / "my-0000000000000002")  # not a name the lifecycle makes
    (root / "0000000000000003").chmod(0o700)
    os.chown(root / "0000000000000003", 65534, 65534)  # another user's
    (root / "0000000000000004").rename(tmp_path / "moved")
    (root / "0000000000000004").symlink_to(tmp_path / "moved")  # a link named as a board
    (root / "0000000000000005").rename(root / "gone")
    (root / "0000000000000005").write_text("a file named as a board")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and "checkin-" not in str(p)}

    assert sweep(root) == 1  # the meeting, alone

    assert names(root) == {f"{n:016x}" for n in (0, 1, 3, 4, 5)} | {"my-0000000000000002", "gone"}
    assert before == {p: p.read_bytes() for p in before if p.exists()}, "a file changed"
    assert all(p.exists() for p in before), "a file went"


def test_a_meeting_whose_running_ranks_left_it_is_swept_once_the_others_are_gone(tmp_path: Path) -> None:
    """Rank 0 killed at the check-in; rank 1, done with the meeting, runs on: it owns the meeting no more."""
    root = killed(tmp_path, count=1)
    Meeting(root, "0123456789abcdef01234567", 1, 2).leave()  # this process, as rank 1

    assert sweep(root) == 2 and names(root) == set()


def test_a_root_others_may_write_read_or_only_enter_or_that_another_user_owns_is_not_swept(tmp_path: Path) -> None:
    """The root is made this user's and 0700: one that grants anything to its group or to others, or
    another user's, is not the one made."""
    root = killed(tmp_path)
    for mode in (0o755, 0o770, 0o701, 0o710):
        root.chmod(mode)
        assert sweep(root) == 0 and names(root) == LEFT, oct(mode)
    root.chmod(0o700)
    os.chown(root, 65534, 65534)
    assert sweep(root) == 0 and names(root) == LEFT


def test_a_root_that_is_gone_a_file_or_a_link_is_swept_of_nothing_and_raises_nothing(tmp_path: Path) -> None:
    root = killed(tmp_path)
    (tmp_path / "file").write_text("")
    (tmp_path / "link").symlink_to(root)

    assert [sweep(tmp_path / name) for name in ("absent", "file", "link")] == [0, 0, 0]
    assert names(root) == LEFT


def test_a_board_from_before_owner_records_is_kept_and_a_meeting_naming_a_gone_pid_goes(tmp_path: Path) -> None:
    """Boards written before owner records hold the state alone: nothing says whose they are."""
    root = killed(tmp_path, count=1)
    (root / "0000000000000000" / "beat-0").write_text("DISTRIBUTED")
    (root / "checkin-0123456789abcdef01234567" / "rank-0").write_text(str(dead_pid()))

    assert sweep(root) == 1 and names(root) == {"0000000000000000"}


def test_a_directory_without_an_owner_record_stays_a_minute_after_its_last_change(tmp_path: Path) -> None:
    root = board_root(str(tmp_path))
    now = time.time()
    for nonce, quiet_s in (("00000000000000f0", 0.0), ("00000000000000f1", 59.5), ("00000000000000f2", 60.5)):
        made = root / nonce
        made.mkdir(mode=0o700)  # as a board is, a moment before its first beat
        (made / "first").write_text("{}")
        os.utime(made, (now - quiet_s, now - quiet_s))

    assert sweep(root) == 1 and names(root) == {"00000000000000f0", "00000000000000f1"}


def test_a_directory_of_more_files_than_a_board_holds_is_kept(tmp_path: Path) -> None:
    root = board_root(str(tmp_path))
    record = f"DISTRIBUTED\n{dead_pid()}::{MACHINE}\n"  # every owner gone
    for nonce, files in (("00000000000000a0", 1024), ("00000000000000a1", 1025)):  # judged up to 1,024 files
        (root / nonce).mkdir(mode=0o700)
        for rank in range(files):
            (root / nonce / f"beat-{rank}").write_text(record)

    assert sweep(root) == 1 and names(root) == {"00000000000000a1"}


def test_links_named_as_the_lifecycles_take_none_of_a_sweeps_judged_directories(tmp_path: Path) -> None:
    """A root strewn with links keeps no leftover from going: only its own directories are judged."""
    root = killed(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (elsewhere / "beat-0").write_text(f"DISTRIBUTED\n{dead_pid()}::{MACHINE}\n")
    links = {f"{n:016x}" for n in range(1, 64)}
    for name in links:
        (root / name).symlink_to(elsewhere)

    assert sweep(root, judge_max=2) == 2  # both leftovers, never a link (one in 2,000 if links were judged)
    assert names(root) == links and os.listdir(elsewhere) == ["beat-0"]


def test_a_sweep_judges_a_bounded_number_of_directories_and_later_sweeps_finish_the_work(tmp_path: Path) -> None:
    root = killed(tmp_path, count=1, boards=2 * JUDGE_MAX + 3)

    assert sweep(root) == JUDGE_MAX
    assert sweep(root, list_max=4) <= 4  # and reads a bounded number of names
    while sweep(root):
        pass
    assert names(root) == set()


def test_a_sweep_reads_at_most_list_max_names_of_a_root_of_many(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cost the doc gives: a root of many more names (none of them ours) is read only so far."""
    root = board_root(str(tmp_path))
    for n in range(LIST_MAX + 500):
        (root / f"not-ours-{n}").touch()
    read: list[str] = []
    scandir = os.scandir

    class Counted:  # the real scan of the real directory, its entries counted as they are read
        def __init__(self, path: Path) -> None:
            self.path, self.entries = path, scandir(path)

        def __enter__(self) -> Counted:
            return self

        def __exit__(self, *_: object) -> None:
            self.entries.close()

        def __iter__(self) -> Counted:
            return self

        def __next__(self) -> os.DirEntry[str]:
            entry = next(self.entries)
            read.append(entry.name)
            return entry

    monkeypatch.setattr(os, "scandir", Counted)
    assert sweep(root) == 0 and LIST_MAX <= len(read) <= LIST_MAX + 1


def test_two_ranks_sweeping_one_root_at_once_remove_each_leftover_once_and_raise_nothing(tmp_path: Path) -> None:
    root = killed(tmp_path, count=1, boards=40)
    counts: list[int] = []
    sweepers = [threading.Thread(target=lambda: counts.append(sweep(root, judge_max=100))) for _ in range(2)]
    for thread in sweepers:
        thread.start()
    for thread in sweepers:
        thread.join()

    assert names(root) == set() and sum(counts) == 41


def test_a_live_jobs_board_and_meeting_survive_a_sweep_made_while_it_runs(tmp_path: Path) -> None:
    """In this process, as a rank of a running job: its own board and meeting are never its sweep's."""
    root = board_root(str(tmp_path))
    meeting = Meeting(root, "fedcba9876543210fedcba98", 0, 1)
    board = Board(root, "ffffffffffffffff", 0)

    assert sweep(root) == 0 and meeting.path.exists() and board.path.exists()
    assert board.state_of(0) == "DISTRIBUTED" and meeting.arrived() == {0: os.getpid()}


def test_the_bounds_the_doc_gives_are_the_sweeps() -> None:
    doc = " ".join((ROOT / "docs" / "failures.md").read_text().split())
    assert f"reads at most {LIST_MAX:,} names there and removes at most {JUDGE_MAX} directories" in doc
