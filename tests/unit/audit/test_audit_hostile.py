"""Hostile input: whatever the bytes, the audit exits 2 (with file:line) or reports a rule; it never
raises. Run through the CLI entry point, so a traceback would fail the test."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest
from audit_logs import clean_events, clean_run, write_events

from lifecycle.audit import audit
from lifecycle.cli import main


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return clean_run(tmp_path_factory.mktemp("good"), world=2)


def corrupt(good: Path, tmp_path: Path, transform) -> Path:  # type: ignore[no-untyped-def]
    shutil.copytree(good, tmp_path, dirs_exist_ok=True)
    path = tmp_path / "rank-00001.jsonl"
    path.write_bytes(transform(path.read_bytes()))
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["audit", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def nth_line(data: bytes, n: int, new: bytes) -> bytes:
    lines = data.splitlines(keepends=True)
    lines[n] = new
    return b"".join(lines)


def with_field(data: bytes, key: str, value: object) -> bytes:
    """The second record with one field replaced (re-serialized, so its hash no longer matches)."""
    record = orjson.loads(data.splitlines()[1])
    return nth_line(data, 1, orjson.dumps({**record, key: value}) + b"\n")


UNREADABLE = {
    "not_json": lambda d: nth_line(d, 3, b"this is not json\n"),
    "binary_garbage": lambda d: nth_line(d, 2, bytes(range(256)) + b"\n"),
    "json_array": lambda d: nth_line(d, 1, b"[1, 2, 3]\n"),
    "json_string": lambda d: nth_line(d, 1, b'"record"\n'),
    "deep_nesting": lambda d: nth_line(d, 1, b"[" * 100_000 + b"]" * 100_000 + b"\n"),
    "deep_object": lambda d: nth_line(d, 1, b'{"a":' * 5000 + b"1" + b"}" * 5000 + b"\n"),
    "wrong_type_seq": lambda d: with_field(d, "seq", "1"),
    "wrong_type_rank": lambda d: with_field(d, "rank", [1]),
    "wrong_type_ts": lambda d: with_field(d, "ts", "noon"),
    "unhashable_event": lambda d: with_field(d, "event", {"x": 1}),
    "unknown_event": lambda d: with_field(d, "event", "boom"),
    "dest_not_a_state": lambda d: d.replace(b'"dest":"VALIDATED"', b'"dest":"NOWHERE"', 1),
    "dest_wrong_type": lambda d: d.replace(b'"dest":"VALIDATED"', b'"dest":7', 1),
    "huge_int": lambda d: nth_line(d, 1, d.splitlines()[1].replace(b'"seq":1', b'"seq":1' + b"0" * 40) + b"\n"),
    "blank_line": lambda d: nth_line(d, 2, b"\n"),
    "nul_bytes": lambda d: nth_line(d, 2, b"\x00" * 64 + b"\n"),
    "utf16": lambda d: d.decode().encode("utf-16"),
}


@pytest.mark.parametrize("name", sorted(UNREADABLE))
def test_unreadable_input_exits_2_with_file_and_line(
    good: Path, tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = corrupt(good, tmp_path, UNREADABLE[name])
    code, out, err = run_cli(capsys, str(tmp_path))
    assert code == 2, (out, err)
    assert f"{path}:" in err and "Traceback" not in err + out


REPORTED = {
    "truncated_last_line": lambda d: d[: len(d) - 40],
    "truncated_mid_file": lambda d: nth_line(d, 4, d.splitlines(keepends=True)[4][:50] + b"\n"),
    "record_edited": lambda d: d.replace(b'"loss":1.0', b'"loss":0.5', 1),
    "record_removed": lambda d: nth_line(d, 6, b""),
    "records_swapped": lambda d: _swap(d, 3, 4),
    "duplicated_record": lambda d: nth_line(d, 5, d.splitlines(keepends=True)[5] * 2),
    "empty_file": lambda d: b"",
    "only_head": lambda d: d.splitlines(keepends=True)[0],
    "hash_missing": lambda d: nth_line(d, 3, d.splitlines()[3].split(b',"hash":')[0] + b"}\n"),
    "hash_wrong_type": lambda d: nth_line(d, 3, d.splitlines()[3].split(b',"hash":')[0] + b',"hash":5}\n'),
    "extra_field": lambda d: nth_line(d, 3, d.splitlines()[3][:-1] + b',"x":1}\n'),
    "two_copies": lambda d: d + d,
}


def _swap(data: bytes, i: int, j: int) -> bytes:
    lines = data.splitlines(keepends=True)
    lines[i], lines[j] = lines[j], lines[i]
    return b"".join(lines)


@pytest.mark.parametrize("name", sorted(REPORTED))
def test_damaged_but_readable_logs_are_reported_by_a_rule(
    good: Path, tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    corrupt(good, tmp_path, REPORTED[name])
    code, out, err = run_cli(capsys, str(tmp_path))
    assert code in (1, 2), (out, err)
    assert "Traceback" not in out + err
    if code == 1:
        assert "LA0" in out


def test_a_100_mb_line_is_refused_without_reading_it_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "rank-00000.jsonl"
    with open(path, "wb") as handle:
        handle.write(b'{"event":"' + b"x" * (100 << 20) + b'"}\n')
    code, _, err = run_cli(capsys, str(path))
    assert code == 2 and f"{path}:1: line is over the 1048576-byte limit" in err


def test_a_nonexistent_path_and_an_empty_directory_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(capsys, str(tmp_path / "nope"))[0] == 2
    code, _, err = run_cli(capsys, str(tmp_path))
    assert code == 2 and "no rank-*.jsonl files" in err


def test_an_unknown_rule_name_exits_2_listing_the_rules(good: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, str(good), "--select", "LA999")
    assert code == 2 and "unknown rule 'LA999'" in err and "LA001 (side-effect-before-validated)" in err


def test_a_truncated_last_line_is_a_died_rank_not_an_unreadable_log(tmp_path: Path) -> None:
    path = write_events(tmp_path, clean_events()[:12])
    path.write_bytes(path.read_bytes() + b'{"event":"side_eff')
    result = audit([str(path)], jobs=1)
    assert not result.errors
    assert {f.rule for f in result.findings} >= {"LA009", "LA010"}


def test_errors_in_one_file_do_not_hide_the_findings_of_the_others(good: Path, tmp_path: Path) -> None:
    corrupt(good, tmp_path, lambda d: nth_line(d, 3, b"garbage\n"))
    result = audit([str(tmp_path)], jobs=1)
    assert result.exit_code == 2 and len(result.errors) == 1
    assert any(r.rank == 0 and r.records > 10 for r in result.ranks)


def test_a_huge_world_size_is_reported_without_listing_every_rank(tmp_path: Path) -> None:
    write_events(tmp_path, clean_events(), rank=0, world=10**12)
    result = audit([str(tmp_path)], jobs=1)
    [finding] = result.findings
    assert finding.rule == "LA014" and "1-999999999999 (999999999999 ranks)" in finding.message


def test_an_input_that_starts_too_many_logs_is_refused(tmp_path: Path) -> None:
    one = write_events(tmp_path / "one", clean_events()[:1]).read_bytes()
    (tmp_path / "rank-00000.jsonl").write_bytes(one * 25)
    result = audit([str(tmp_path / "rank-00000.jsonl")], jobs=1, max_logs_per_input=20)
    assert result.exit_code == 2 and "more than 20 logs start in this one input" in str(result.errors[0])


def test_a_log_missing_its_head_is_reported_with_its_rank(good: Path, tmp_path: Path) -> None:
    corrupt(good, tmp_path, lambda d: b"".join(d.splitlines(keepends=True)[3:]))
    result = audit([str(tmp_path)], jobs=1)
    head = [f for f in result.findings if f.rule == "LA009"]
    assert [(f.rank, f.line) for f in head] == [(1, 1)]
    assert "log starts at seq 3, not 0: its head is missing (truncated)" in head[0].message
