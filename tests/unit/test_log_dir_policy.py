"""The log directory's policy decided directly (lifecycle.log's `inspect_log` and the rest): which
files are our logs, where a chain ends, which run a directory holds, and the exact set of files
`--overwrite` removes.
Real files, real symbolic links, hard links and FIFOs; tests/unit/test_log_dir_owned.py shows the
same rules through a Lifecycle end to end.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import orjson
import pytest

from lifecycle.log import GENESIS, check_log_dir
from lifecycle.testing import (
    ChainEnd,
    existing_policy_problem,
    first_run_id,
    inspect_log,
    other_run,
    own_file_problem,
    rank_file,
    removable_ranks,
)

OUTSIDE = b"precious\n"


def line(event: str, seq: int, run_id: str = "run-a", **extra: object) -> bytes:
    return orjson.dumps({"event": event, "run_id": run_id, "seq": seq, "hash": f"h{seq}", **extra}) + b"\n"


def log(run_id: str = "run-a", *, attempts: int = 1, tail: bytes = b"") -> bytes:
    """A startup log of `attempts` attempts (4 records each, chained by seq), then `tail`."""
    out, seq = b"", 0
    for _ in range(attempts):
        out += line("lifecycle_started", seq, run_id)
        out += b"".join(line("transition_started", seq + i, run_id) for i in (1, 2, 3))
        seq += 4
    return out + tail


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_rank_files_are_named_with_five_digits() -> None:
    assert rank_file(Path("d"), 7) == Path("d/rank-00007.jsonl")
    assert rank_file(Path("d"), 123456).name == "rank-123456.jsonl"


# -- check_log_dir -------------------------------------------------------------------------------------
def test_an_existing_writable_directory_or_a_creatable_path_can_hold_the_log(tmp_path: Path) -> None:
    assert check_log_dir(tmp_path) is None
    assert check_log_dir(tmp_path / "a" / "b" / "c") is None
    assert not (tmp_path / "a").exists(), "pure: creates nothing"


def test_a_log_dir_that_is_a_link_is_refused_even_to_a_real_directory(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to(tmp_path)
    problem = check_log_dir(tmp_path / "link")
    assert problem == (
        f"log_dir {str(tmp_path / 'link')!r} is a symbolic link (to {str(tmp_path)!r}): the startup "
        "log never follows links; pass the real directory path"
    )


def test_a_log_dir_that_is_a_file_or_under_a_file_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "f", b"")
    assert (
        check_log_dir(tmp_path / "f") == f"log_dir {str(tmp_path / 'f')!r} exists and is not a directory: "
        "choose a directory path"
    )
    assert check_log_dir(tmp_path / "f" / "x" / "y") == (
        f"log_dir {str(tmp_path / 'f' / 'x' / 'y')!r} cannot be created under {str(tmp_path / 'f')!r}: "
        "choose a writable location"
    )
    os.chmod(tmp_path / "f", 0o755)  # an executable file is writable and searchable, still no directory
    assert check_log_dir(tmp_path / "f" / "x") is not None


# -- inspect_log ---------------------------------------------------------------------------------------
def test_no_file_is_none_and_an_empty_file_is_a_fresh_chain_of_that_inode(tmp_path: Path) -> None:
    assert inspect_log(tmp_path / "rank-00000.jsonl") is None
    path = write(tmp_path / "rank-00000.jsonl", b"")
    st = os.stat(path)
    assert inspect_log(path) == ChainEnd(ident=(st.st_dev, st.st_ino))
    assert ChainEnd() == ChainEnd(
        seq=0, prev=GENESIS, attempts=0, truncated=0, complete=0, run_id=None, ident=None, chained=True
    )


def test_a_chain_end_is_a_value_built_by_field_name_that_no_one_can_change() -> None:
    """What `inspect_log` returns is what the writer continues from: a caller holding one cannot
    move it, and its fields are named (their order is no promise)."""
    end = ChainEnd(seq=4, prev="h3")
    with pytest.raises(dataclasses.FrozenInstanceError):
        end.seq = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        ChainEnd(4, "h3")  # type: ignore[misc]
    assert (end.seq, end.prev) == (4, "h3")


def test_a_log_continues_after_its_last_record_counting_its_attempts(tmp_path: Path) -> None:
    data = log(attempts=2)
    path = write(tmp_path / "rank-00000.jsonl", data)
    st = os.stat(path)
    assert inspect_log(path) == ChainEnd(
        seq=8,
        prev="h7",
        attempts=2,
        truncated=0,
        complete=len(data),
        run_id="run-a",
        ident=(st.st_dev, st.st_ino),
        chained=True,
    )
    assert first_run_id(path) == "run-a"


def test_a_torn_last_line_is_cut_and_the_chain_ends_before_it(tmp_path: Path) -> None:
    data = log()
    torn = b'{"event":"transition_sta'
    end = inspect_log(write(tmp_path / "rank-00000.jsonl", data + torn))
    assert isinstance(end, ChainEnd)
    assert (end.seq, end.prev, end.complete, end.truncated, end.chained) == (4, "h3", len(data), len(torn), True)


def test_blank_lines_are_skipped_when_finding_the_last_record(tmp_path: Path) -> None:
    end = inspect_log(write(tmp_path / "rank-00000.jsonl", log() + b"\n  \n"))
    assert isinstance(end, ChainEnd) and (end.seq, end.prev, end.attempts) == (4, "h3", 1)


def test_a_log_whose_first_line_is_unfinished_is_cut_whole_and_its_chain_starts_afresh(tmp_path: Path) -> None:
    first = line("lifecycle_started", 0)[:-1]  # complete but for its newline: the writer was killed
    path = write(tmp_path / "rank-00000.jsonl", first)
    st = os.stat(path)
    assert inspect_log(path) == ChainEnd(
        seq=0,
        prev=GENESIS,
        attempts=0,
        truncated=len(first),
        complete=0,
        run_id="run-a",
        ident=(st.st_dev, st.st_ino),
        chained=True,
    )


@pytest.mark.parametrize(
    "last",
    [
        b'{"event":"x","seq":"4","hash":"h"}\n',
        b'{"event":"x","seq":4,"hash":5}\n',
        b'{"event":"x","hash":"h"}\n',
        b'{"event":"x","seq":4}\n',
        b"[4]\n",
        b"nope\n",
    ],
)
def test_a_log_whose_last_line_is_not_a_chained_record_is_replaceable_but_not_continuable(
    tmp_path: Path, last: bytes
) -> None:
    data = log() + last
    path = write(tmp_path / "rank-00000.jsonl", data)
    st = os.stat(path)
    end = inspect_log(path)
    assert end == ChainEnd(complete=len(data), run_id="run-a", ident=(st.st_dev, st.st_ino), chained=False)
    assert end.unchained_problem(path) == (
        f"log_dir {str(tmp_path)!r}: rank-00000.jsonl does not end with a hash-chained record, so a new attempt "
        "cannot continue it: move it out of the log directory, or choose another log directory, or set "
        "logging.existing to 'overwrite' to replace it"
    )
    assert dataclasses.replace(end, chained=True).unchained_problem(path) is None


@pytest.mark.parametrize(
    "first",
    [
        b"precious\n",
        b"[1]\n",
        b'{"event":"transition_started","run_id":"r"}\n',
        b'{"event":"lifecycle_started"}\n',
        b'{"event":"lifecycle_started","run_id":7}\n',
        b"\n",
    ],
)
def test_a_file_that_does_not_start_with_lifecycle_started_naming_a_run_is_not_ours(
    tmp_path: Path, first: bytes
) -> None:
    path = write(tmp_path / "rank-00000.jsonl", first + log())
    assert inspect_log(path) == (
        f"log_dir {str(tmp_path)!r}: rank-00000.jsonl does not start with a "
        "lifecycle_started record, so it is not one of our startup logs: move it out of "
        "the log directory, or choose another log directory"
    )
    assert first_run_id(path) is None


def test_a_symbolic_link_is_not_ours_even_to_one_of_our_logs(tmp_path: Path) -> None:
    target = write(tmp_path / "real.jsonl", log())
    (tmp_path / "rank-00000.jsonl").symlink_to(target)
    problem = inspect_log(tmp_path / "rank-00000.jsonl")
    assert problem == (
        f"log_dir {str(tmp_path)!r}: rank-00000.jsonl is a symbolic link (to {str(target)!r}); the "
        "startup log never follows links, so it is not one of our startup logs: move it out of the "
        "log directory, or choose another log directory"
    )
    (tmp_path / "rank-00001.jsonl").symlink_to(tmp_path / "missing")
    assert "is a symbolic link" in str(inspect_log(tmp_path / "rank-00001.jsonl"))


def test_a_fifo_or_a_directory_is_not_ours_and_is_never_opened(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "rank-00000.jsonl")  # opening it for reading would block: it must not be opened
    assert inspect_log(tmp_path / "rank-00000.jsonl") == (
        f"log_dir {str(tmp_path)!r}: rank-00000.jsonl is not a regular file, so it is not one of our startup logs: "
        "move it out of the log directory, or choose another log directory"
    )
    (tmp_path / "rank-00001.jsonl").mkdir()
    assert "is not a regular file" in str(inspect_log(tmp_path / "rank-00001.jsonl"))


def test_a_hard_linked_log_is_not_ours_because_another_name_shares_it(tmp_path: Path) -> None:
    path = write(tmp_path / "rank-00000.jsonl", log())
    os.link(path, tmp_path / "elsewhere")
    assert "rank-00000.jsonl has 2 hard links (another name shares its content)" in str(inspect_log(path))


WRITE_ONLY = Path("/proc/sys/vm/drop_caches")  # a regular file (0200) that no one, root included, may read
UNREADABLE = Path("/proc/self/mem")  # a regular file that opens but whose first page cannot be read


@pytest.mark.skipif(not (WRITE_ONLY.exists() and UNREADABLE.exists()), reason="needs Linux's /proc")
def test_a_file_that_cannot_be_opened_or_read_is_not_ours() -> None:
    assert inspect_log(WRITE_ONLY) == (
        f"log_dir {str(WRITE_ONLY.parent)!r}: drop_caches cannot be read (Permission "
        "denied), so it is not one of our startup logs: move it out of the log "
        "directory, or choose another log directory"
    )
    assert "mem cannot be read (Input/output error), so it is not one of our startup logs" in str(
        inspect_log(UNREADABLE)
    )


# -- which run a directory holds -----------------------------------------------------------------------
def test_another_run_is_found_in_this_ranks_file_or_in_rank_0s(tmp_path: Path) -> None:
    assert other_run(tmp_path, 3, "run-a") is None
    write(rank_file(tmp_path, 3), log("run-a"))
    assert other_run(tmp_path, 3, "run-a") is None
    write(rank_file(tmp_path, 0), log("run-b"))
    assert other_run(tmp_path, 3, "run-a") == ("run-b", rank_file(tmp_path, 0))
    write(rank_file(tmp_path, 3), log("run-c"))
    assert other_run(tmp_path, 3, "run-a") == ("run-c", rank_file(tmp_path, 3)), "this rank's own file first"
    write(rank_file(tmp_path, 5), log("run-d"))
    assert other_run(tmp_path, 4, "run-b") is None, "other ranks' files are not opened"


def test_refuse_names_the_other_run_and_the_three_ways_out(tmp_path: Path) -> None:
    write(rank_file(tmp_path, 0), log("run-old"))
    assert existing_policy_problem(tmp_path, 0, "run-new", "refuse") == (
        f"log_dir {str(tmp_path)!r} holds the startup logs of another run, 'run-old' (rank-00000.jsonl): use a new "
        "log directory, or set logging.existing to 'overwrite' (`lifecycle run --overwrite`) to replace them, or to "
        "'append' to add this run to them (the audit then reports mixed runs)"
    )
    assert existing_policy_problem(tmp_path, 0, "run-old", "refuse") is None
    assert existing_policy_problem(tmp_path, 0, "run-new", "append") is None
    assert existing_policy_problem(tmp_path, 0, "run-new", "overwrite") is None
    assert existing_policy_problem(tmp_path / "absent", 0, "run-new", "refuse") is None


@pytest.mark.parametrize("policy", ["refuse", "append", "overwrite"])
def test_a_rank_file_that_is_not_ours_is_refused_under_every_policy(tmp_path: Path, policy: str) -> None:
    write(rank_file(tmp_path, 1), OUTSIDE)
    problem = existing_policy_problem(tmp_path, 1, "run-a", policy)
    assert problem is not None and "rank-00001.jsonl does not start with a lifecycle_started record" in problem
    assert own_file_problem(tmp_path, 1, policy) == problem
    assert own_file_problem(tmp_path, 2, policy) is None


@pytest.mark.parametrize("policy", ["refuse", "append"])
def test_an_unchained_log_is_refused_unless_it_is_to_be_overwritten(tmp_path: Path, policy: str) -> None:
    write(rank_file(tmp_path, 0), log(tail=b"[1]\n"))
    problem = own_file_problem(tmp_path, 0, policy)
    assert problem is not None and "does not end with a hash-chained record" in problem
    assert existing_policy_problem(tmp_path, 0, "run-a", policy) == problem
    assert own_file_problem(tmp_path, 0, "overwrite") is None
    write(rank_file(tmp_path, 0), log())
    assert own_file_problem(tmp_path, 0, policy) is None


# -- what --overwrite removes --------------------------------------------------------------------------
def test_overwrite_removes_exactly_the_checked_logs_of_ranks_beyond_the_world(tmp_path: Path) -> None:
    outside = write(tmp_path.parent / f"{tmp_path.name}-outside", OUTSIDE)
    for rank in (0, 1, 2, 3, 12):
        write(rank_file(tmp_path, rank), log("run-old"))
    write(tmp_path / "rank-00004.jsonl", b"")  # an empty rank file: ours, a run that died at once
    write(tmp_path / "rank-00005.jsonl", OUTSIDE)  # not a startup log
    (tmp_path / "rank-00006.jsonl").symlink_to(outside)
    os.link(outside, tmp_path / "rank-00007.jsonl")
    (tmp_path / "rank-00008.jsonl").mkdir()
    write(tmp_path / "rank-x0009.jsonl", log("run-old"))
    write(tmp_path / "rank-.jsonl", log("run-old"))
    write(tmp_path / "rank-00010.jsonl.bak", log("run-old"))
    write(tmp_path / "rank-00011.json", log("run-old"))
    write(tmp_path / "notes.txt", log("run-old"))
    assert removable_ranks(tmp_path, 2) == [rank_file(tmp_path, r) for r in (2, 3, 4, 12)]
    assert removable_ranks(tmp_path, 3) == [rank_file(tmp_path, r) for r in (3, 4, 12)]
    assert removable_ranks(tmp_path, 13) == []
    assert removable_ranks(tmp_path / "absent", 1) == []
