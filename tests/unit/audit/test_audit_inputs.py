"""What users feed `lifecycle audit` besides a good log directory: nothing at all, FIFOs and
`<(zcat ...)`, terminal escapes in error texts, edited and re-hashed logs, a wrong file name, a
missing path among good ones, a cut last line. Each gets the right exit code and wording."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from audit_logs import clean_events, clean_run, index, rechain, write_events

from lifecycle.audit import audit
from lifecycle.cli import main
from lifecycle.testing import text

ROOT = Path(__file__).resolve().parents[3]


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["audit", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def run_module(
    *args: str, data: bytes | None = None, timeout: float = 60, pass_fds: tuple[int, ...] = ()
) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "lifecycle", "audit", *args],
        input=data,
        capture_output=True,
        env=env,
        timeout=timeout,
        check=False,
        pass_fds=pass_fds,
    )


# -- no records -------------------------------------------------------------------------------


def test_an_empty_file_is_no_records_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "rank-00000.jsonl").write_bytes(b"")
    code, out, err = cli(capsys, str(tmp_path / "rank-00000.jsonl"))
    assert code == 2 and f"{tmp_path / 'rank-00000.jsonl'}: no records: the input holds no startup-log record" in err
    assert out.strip() == "audited 0 records from 1 input, no ranks: no records"


def test_ten_thousand_empty_files_are_no_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for rank in range(10_000):
        (tmp_path / f"rank-{rank:05d}.jsonl").touch()
    code, out, err = cli(capsys, str(tmp_path))
    assert code == 2 and "none of the 10000 inputs holds a startup-log record" in err
    assert out.strip() == "audited 0 records from 10000 inputs, no ranks: no records"
    assert err.count("\n") == 1  # one line, not one per file


def test_empty_stdin_is_no_records() -> None:
    done = run_module("-", data=b"")
    assert done.returncode == 2 and b"<stdin>: no records" in done.stderr


def test_an_empty_file_among_good_ones_is_a_truncated_log(tmp_path: Path) -> None:
    clean_run(tmp_path, world=2)
    (tmp_path / "rank-00001.jsonl").write_bytes(b"")
    result = audit([str(tmp_path)], jobs=1)
    empty = [f for f in result.findings if f.rule == "LA009"]
    assert [(f.rank, f.source) for f in empty] == [(1, str(tmp_path / "rank-00001.jsonl"))]
    assert "the log is empty" in empty[0].message and result.exit_code == 1


# -- FIFOs, pipes -------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_in_a_log_directory_is_skipped_with_a_finding_not_waited_on(tmp_path: Path) -> None:
    clean_run(tmp_path, world=2)
    os.mkfifo(tmp_path / "rank-00002.jsonl")
    done = run_module(str(tmp_path), "--format", "json", timeout=60)  # a hang fails here, not forever
    assert done.returncode == 1, done.stderr
    assert b'"rule": "LA020"' in done.stdout and b"a FIFO (named pipe) named like a rank log" in done.stdout


def _feed_fifo(path: Path, data: bytes) -> threading.Thread:
    def write() -> None:
        with open(path, "wb") as handle:
            handle.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    return writer


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_named_on_the_command_line_is_read_as_a_stream(tmp_path: Path) -> None:
    log = write_events(tmp_path / "logs", clean_events())
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    writer = _feed_fifo(fifo, log.read_bytes())
    result = audit([str(fifo)], jobs=1)
    writer.join(10)
    assert (result.exit_code, result.records) == (0, len(clean_events()))


def test_a_dev_fd_path_from_process_substitution_is_read_as_a_stream(tmp_path: Path) -> None:
    data = b"".join(p.read_bytes() for p in sorted(clean_run(tmp_path, world=2).glob("rank-*.jsonl")))
    read_end, write_end = os.pipe()
    writer = threading.Thread(target=lambda: (os.write(write_end, data), os.close(write_end)), daemon=True)
    writer.start()
    try:
        done = run_module(f"/dev/fd/{read_end}", pass_fds=(read_end,))
    finally:
        os.close(read_end)
    writer.join(10)
    assert done.returncode == 0, done.stderr
    assert b"ranks 0-1 (2 ranks): clean" in done.stdout


# -- what the report prints -----------------------------------------------------------------------


def test_terminal_escapes_in_an_error_are_printed_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ev = clean_events()
    at = index(ev, "transition_started", trigger="build_model") + 1
    evil = "\x1b]0;pwned\x07\x1b[2J\x1b[31mboom\u202e\x9b"
    ev[at:] = [
        (
            "transition_failed",
            dict(trigger="build_model", source="DISTRIBUTED", error_type="RuntimeError", error=evil, duration_s=0.1),
        )
    ]
    write_events(tmp_path, ev)
    _, out, _ = cli(capsys, str(tmp_path))
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out and "\u202e" not in out
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31mboom\\u202e\\x9b" in out


def test_escapes_in_a_missing_paths_name_are_printed_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, str(tmp_path / "rank-\x1b[2J.jsonl"))
    assert code == 2 and "\x1b" not in err and "rank-\\x1b[2J.jsonl: no such file" in err


def test_the_summary_names_one_rank_or_several_and_counts_in_words(tmp_path: Path) -> None:
    write_events(tmp_path / "one", clean_events())
    assert text(audit([str(tmp_path / "one")], jobs=1)).startswith(
        f"audited {len(clean_events())} records from 1 input, rank 0: clean"
    )
    clean_run(tmp_path / "two", world=2)
    assert ", ranks 0-1 (2 ranks): clean" in text(audit([str(tmp_path / "two")], jobs=1))


# -- time going backwards -------------------------------------------------------------------------


def test_time_going_backwards_in_a_rehashed_log_is_a_finding_and_never_a_negative_duration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_events(tmp_path, clean_events())

    def back_in_time(records: list[dict[str, object]]) -> None:
        done = index(clean_events(), "transition_completed", trigger="build_model")
        records[done]["ts"] = float(records[done]["ts"]) - 3600.0  # type: ignore[arg-type]

    rechain(path, back_in_time)
    result = audit([str(path)], jobs=1)
    [la017] = [f for f in result.findings if f.rule == "LA017"]
    assert la017.line == index(clean_events(), "transition_completed", trigger="build_model") + 1
    assert "is 3599.99" in la017.message and "earlier than the record before it" in la017.message
    assert {f.rule for f in result.findings} == {"LA017", "LA022"}  # an hour back is also impossible
    assert all(seg.duration >= 0 for r in result.ranks for seg in r.segments)
    code, out, _ = cli(capsys, str(path), "--blame", "--critical-chain")
    assert code == 1 and "-0." not in out and " -" not in out.split("blame")[1]


# -- options and paths ----------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", " ", ",", " , "])
def test_a_select_that_names_no_rule_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    path = write_events(tmp_path, clean_events())
    path.write_bytes(path.read_bytes().replace(b'"loss":1.0', b'"loss":9.0', 1))  # tampered
    code, out, err = cli(capsys, str(tmp_path), "--select", value)
    assert code == 2 and out == ""
    assert f"--select {value!r} names no rule" in err


def test_a_missing_path_is_reported_and_the_other_paths_are_still_audited(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clean_run(tmp_path / "good", world=2)
    code, out, err = cli(capsys, str(tmp_path / "nope"), str(tmp_path / "good"), str(tmp_path / "gone.jsonl"))
    assert code == 2
    assert f"{tmp_path / 'nope'}: no such file or directory" in err
    assert f"{tmp_path / 'gone.jsonl'}: no such file or directory" in err
    assert out.startswith("audited ") and "ranks 0-1 (2 ranks): UNREADABLE INPUT" in out


def test_a_rank_file_holding_another_ranks_records_is_a_finding(tmp_path: Path) -> None:
    write_events(tmp_path, clean_events(), rank=0, world=1)
    (tmp_path / "rank-00000.jsonl").rename(tmp_path / "rank-00042.jsonl")
    result = audit([str(tmp_path)], jobs=1)
    [finding] = result.findings
    assert (finding.rule, finding.rank, finding.line) == ("LA019", 0, 1)
    assert "named for rank 42 but its records are rank 0" in finding.message


def test_a_log_whose_rank_changes_midway_is_a_finding(tmp_path: Path) -> None:
    path = write_events(tmp_path, clean_events(), rank=0, world=2)

    def splice(records: list[dict[str, object]]) -> None:
        for rec in records[10:]:
            rec["rank"] = 1

    rechain(path, splice)
    found = [f for f in audit([str(path)], jobs=1).findings if f.rule == "LA019"]
    assert [(f.line, f.count) for f in found] == [(11, 2)]  # the change, then the file name at the end
    assert "rank changes from 0 to 1 inside one log" in found[0].message


# -- a cut last line ------------------------------------------------------------------------------


def test_a_log_cut_in_its_last_line_is_reported_as_truncated_without_contradicting_itself(tmp_path: Path) -> None:
    path = clean_run(tmp_path, world=1) / "rank-00000.jsonl"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])  # the shutdown's transition_completed, cut
    result = audit([str(path)], jobs=1)
    assert not result.errors
    messages = {f.rule: f.message for f in result.findings}
    assert "the last line (" in messages["LA009"] and "is truncated" in messages["LA009"]
    died = messages["LA010"]
    assert "log stops in state CALLBACKS_BOUND during 'shutdown'" in died
    assert "after reaching plan training's target CALLBACKS_BOUND" in died and "last line truncated" in died
    assert "before plan training's target" not in died and "with no failure or shutdown record" not in died
