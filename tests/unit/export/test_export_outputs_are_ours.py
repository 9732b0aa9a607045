"""`export`, `report` and `export --follow` write only files that are theirs: a link, a directory, a hard link or
another program's file is refused (one line, exit 2) and left as it was; a full disk (a real 64 KiB tmpfs) leaves the
earlier file whole and prints one line, the OpenTelemetry SDK's errors included."""

from __future__ import annotations

import gzip
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from lifecycle.cli import main

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs, unmounted afterwards; skipped where mounting is not permitted."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path, *, leave: int = 0) -> None:
    """Fill `disk` up, then give back `leave` bytes."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError:
            pass
    if leave:
        os.truncate(filler, max(0, filler.stat().st_size - leave))


def cli(*argv: str, file_size_limit: int | None = None) -> subprocess.CompletedProcess[str]:
    """`lifecycle ARGV` in its own process: what a user sees on both streams; with `file_size_limit`, no file it
    writes may grow past that many bytes (RLIMIT_FSIZE: a write past it fails, as on a full disk)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def limit() -> None:
        if file_size_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    command = [sys.executable, "-m", "lifecycle", *argv]
    return subprocess.run(command, capture_output=True, text=True, env=env, preexec_fn=limit)


def one_line(capsys: pytest.CaptureFixture[str], *words: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert all(w in err for w in words), err
    return err


@pytest.mark.parametrize("command", [["export"], ["export", "--format", "otlp-json"], ["report"]])
def test_an_output_that_is_a_symbolic_link_is_refused_and_its_target_is_untouched(
    tmp_path: Path, failed_logs: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    if "otlp-json" in command:
        pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")
    target = tmp_path / "notes.txt"
    target.write_text("mine\n")
    (tmp_path / "out").symlink_to(target)
    assert main([*command, str(failed_logs), "-o", str(tmp_path / "out")]) == 2
    one_line(capsys, "symbolic link", "choose another path")
    assert target.read_text() == "mine\n" and (tmp_path / "out").is_symlink()


def test_follow_does_not_append_through_a_symbolic_link(
    tmp_path: Path, failed_logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")
    target = tmp_path / "live.jsonl"
    target.write_bytes(b"")
    (tmp_path / "out").symlink_to(target)
    argv = ["export", "--follow", "--format", "otlp-json", str(failed_logs), "--idle-timeout", "0"]
    assert main([*argv, "-o", str(tmp_path / "out")]) == 2
    one_line(capsys, "symbolic link")
    assert target.read_bytes() == b""
    assert main([*argv, "-o", str(target)]) == 0  # the file itself: appended to
    assert main([*argv, "-o", str(target)]) == 0  # and again: it is ours
    lines = target.read_bytes().splitlines()
    assert len(lines) >= 2 and all(orjson.loads(line)["resourceSpans"] for line in lines)


def test_a_file_we_did_not_write_is_not_overwritten_but_our_own_is_replaced(
    tmp_path: Path, failed_logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = tmp_path / "notes.html"
    notes.write_text("<p>my notes</p>\n")
    assert main(["report", str(failed_logs), "-o", str(notes)]) == 2
    one_line(capsys, "not an output we wrote")
    assert notes.read_text() == "<p>my notes</p>\n"
    trace = tmp_path / "trace.json.gz"
    assert main(["export", str(failed_logs), "-o", str(trace)]) == 0
    assert main(["export", str(failed_logs), "-o", str(trace)]) == 0  # our own trace: replaced
    assert orjson.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    assert main(["report", str(failed_logs), "-o", str(trace)]) == 2  # a trace is not a report
    linked = tmp_path / "linked.json"
    os.link(trace, linked)
    assert main(["export", str(failed_logs), "-o", str(linked)]) == 2
    capsys.readouterr()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["linked.json", "notes.html", "trace.json.gz"]  # no temp


@pytest.mark.parametrize("name", ["theirs.json", "theirs.json.gz"])
def test_another_programs_chrome_trace_that_starts_as_ours_is_not_overwritten(
    tmp_path: Path, failed_logs: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """A profiler's trace written compactly begins `{"traceEvents":` too; only our producer makes it ours."""
    theirs = orjson.dumps({"traceEvents": [{"ph": "X", "name": "step", "ts": 0, "dur": 1, "pid": 1, "tid": 1}]})
    target = tmp_path / name
    target.write_bytes(gzip.compress(theirs) if name.endswith(".gz") else theirs)
    before = target.read_bytes()
    assert main(["export", str(failed_logs), "-o", str(target)]) == 2
    one_line(capsys, "not an output we wrote")
    assert target.read_bytes() == before
    ours = tmp_path / f"ours-{name}"
    assert main(["export", str(failed_logs), "-o", str(ours)]) == 0
    assert main(["export", str(failed_logs), "-o", str(ours)]) == 0  # our own: replaced


COLLECTORS = (
    b'{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"trainer"}}]},'
    b'"scopeSpans":[{"scope":{"name":"opentelemetry.instrumentation.requests"},"spans":[]}]}]}\n'
)
"""What an OpenTelemetry Collector's file exporter writes: it begins as our OTLP JSON does."""


@pytest.mark.parametrize("follow", [False, True])
def test_an_opentelemetry_collectors_file_is_neither_replaced_nor_appended_to(
    tmp_path: Path, failed_logs: Path, capsys: pytest.CaptureFixture[str], follow: bool
) -> None:
    pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")
    theirs = tmp_path / "collector.jsonl"
    theirs.write_bytes(COLLECTORS)
    argv = ["export", *(["--follow"] if follow else []), "--format", "otlp-json", str(failed_logs)]
    argv += ["--idle-timeout", "0"] if follow else []
    assert main([*argv, "-o", str(theirs)]) == 2
    one_line(capsys, "not an output we wrote")
    assert theirs.read_bytes() == COLLECTORS
    ours = tmp_path / "ours.jsonl"
    assert main([*argv, "-o", str(ours)]) == 0
    assert main([*argv, "-o", str(ours)]) == 0  # our own: replaced, or appended to


def test_a_chrome_trace_of_ours_with_its_producer_at_the_end_is_still_replaced(
    tmp_path: Path, failed_logs: Path
) -> None:
    """As earlier versions wrote it: `traceEvents` first, our producer in `otherData` at the end."""
    earlier = tmp_path / "trace.json"
    events = [{"ph": "X", "name": "VALIDATED", "ts": 0, "dur": 1, "pid": 1, "tid": 1}] * 5000  # > 64 KiB before it
    earlier.write_bytes(orjson.dumps({"traceEvents": events, "otherData": {"producer": "megatron-lifecycle"}}))
    assert main(["export", str(failed_logs), "-o", str(earlier)]) == 0
    assert orjson.loads(earlier.read_bytes())["otherData"]["producer"] == "megatron-lifecycle"


def test_a_directory_as_output_is_one_line_and_exit_2(tmp_path: Path, failed_logs: Path) -> None:
    done = cli("report", str(failed_logs), "-o", str(tmp_path))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "is a directory" in done.stderr, done.stderr


def test_a_report_that_fails_on_a_full_disk_leaves_the_earlier_report_whole(
    small_disk: Path, failed_logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = small_disk / "report.html"
    assert main(["report", str(failed_logs), "-o", str(report)]) == 0
    before = report.read_bytes()
    fill(small_disk)
    longer = "https://example.org/" + "r" * 4000 + "/"  # the new report needs pages the old one does not free
    assert main(["report", str(failed_logs), "-o", str(report), "--rules-url", longer]) == 2
    one_line(capsys, "No space left on device")
    assert report.read_bytes() == before
    assert main(["export", str(failed_logs), "-o", str(small_disk / "x.json.gz")]) == 2
    one_line(capsys, "No space left on device")
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "report.html"]  # no 0-byte trace, no temp


def test_follow_on_a_full_disk_is_one_line_and_exit_2_with_whole_lines_before_it(
    small_disk: Path, failed_logs: Path
) -> None:
    pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")
    fill(small_disk, leave=4096)
    out = small_disk / "live.jsonl"
    done = cli("export", "--follow", "--format", "otlp-json", str(failed_logs), "-o", str(out), "--idle-timeout", "0")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "No space left on device" in done.stderr, done.stderr
    lines = out.read_bytes().split(b"\n") if out.exists() else [b""]
    assert lines[-1] == b"" and all(orjson.loads(line) for line in lines[:-1])  # no line cut in the middle


def test_a_write_past_the_file_size_limit_leaves_the_earlier_files_whole_without_a_root_or_a_tmpfs(
    tmp_path: Path, failed_logs: Path
) -> None:
    report, trace = tmp_path / "report.html", tmp_path / "trace.json.gz"
    assert main(["report", str(failed_logs), "-o", str(report)]) == 0
    before = report.read_bytes()
    for argv in (["report", "-o", str(report)], ["export", "-o", str(trace)]):
        done = cli(*argv, str(failed_logs), file_size_limit=512)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and "File too large" in done.stderr, done.stderr
    assert report.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]  # no 0-byte trace, no temporary file
    pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")
    live = tmp_path / "live.jsonl"
    done = cli(
        "export",
        "--follow",
        "--format",
        "otlp-json",
        str(failed_logs),
        "-o",
        str(live),
        "--idle-timeout",
        "0",
        file_size_limit=4096,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "File too large" in done.stderr, done.stderr
    lines = live.read_bytes().split(b"\n") if live.exists() else [b""]
    assert lines[-1] == b"" and all(orjson.loads(line) for line in lines[:-1])  # no line cut in the middle


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["export", "--follow", "--format", "otlp-json", "--idle-timeout", "-1"], "--idle-timeout"),
        (["export", "--follow", "--format", "otlp-json", "--idle-timeout", "nan"], "--idle-timeout"),
        (["export", "--follow", "--format", "otlp-json", "--idle-timeout", "inf"], "--idle-timeout"),
        (["report", "--per-rank-up-to", "-5"], "--per-rank-up-to"),
        (["report", "--rules-url", "javascript:alert(1)"], "--rules-url"),
        (["report", "--rules-url", "java\tscript:alert(1)"], "--rules-url"),
        (["report", "--rules-url", "data:text/html,hi"], "--rules-url"),
    ],
)
def test_a_bad_option_value_is_one_line_naming_the_option_and_exit_2(
    tmp_path: Path, failed_logs: Path, argv: list[str], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*argv, str(failed_logs), "-o", str(tmp_path / "out")])
    assert exited.value.code == 2
    one_line(capsys, option)
    assert not (tmp_path / "out").exists()


def test_an_http_url_or_a_path_is_a_good_rules_url(tmp_path: Path, failed_logs: Path) -> None:
    for url in ("https://example.org/rules/", "http://wiki/rules/", "../rules/"):
        assert main(["report", str(failed_logs), "-o", str(tmp_path / "r.html"), "--rules-url", url]) == 0
        assert url.encode() in (tmp_path / "r.html").read_bytes()


def test_an_empty_file_is_taken_its_mode_kept_and_a_fifo_or_another_gzip_is_refused(
    tmp_path: Path, failed_logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.json.gz"
    trace.touch()  # what a failed export of an older version left: nothing to lose
    assert main(["export", str(failed_logs), "-o", str(trace)]) == 0
    trace.chmod(0o640)
    assert main(["export", str(failed_logs), "-o", str(trace)]) == 0
    assert trace.stat().st_mode & 0o777 == 0o640
    other = tmp_path / "other.json.gz"
    other.write_bytes(gzip.compress(b'{"mine": true}'))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    capsys.readouterr()
    for target, why in ((other, "not an output we wrote"), (fifo, "not a regular file")):
        assert main(["export", str(failed_logs), "-o", str(target)]) == 2
        one_line(capsys, why)
    assert gzip.decompress(other.read_bytes()) == b'{"mine": true}'
