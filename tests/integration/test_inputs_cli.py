"""`lifecycle run` as a user runs it, on hostile inputs: a log directory typed with `#` and `~` is
that path; credentials in a failing value reach neither stderr nor the log; a rank file that is a
symlink is refused by name with its target untouched; a second run is refused while another process
owns the log directory, naming that run and its host."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.release_independent]  # the floor skips it (scripts/test)
ROOT = Path(__file__).resolve().parents[2]
ENV = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
RUN = [sys.executable, "-m", "lifecycle", "run", "--preset", "tiny-gpt", "--steps", "0"]
HF = "hf_" + "a1B2c3D4e5F6g7H8i9J0kLmN"


def run(*args: str, cwd: Path = ROOT, plan: str = "convert") -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RUN, "--plan", plan, *args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300)


def test_a_log_dir_with_hash_and_tilde_is_that_path_and_secrets_reach_neither_stderr_nor_the_log(
    tmp_path: Path,
) -> None:
    secret_dir = f"/nonexistent/password=hunter22/{HF}"
    done = run(
        "--log-dir",
        "~/runs #1",
        "--set",
        "tokenizer.type=huggingface",
        "--set",
        f"tokenizer.path={secret_dir}",
        cwd=tmp_path,
        plan="training",
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "tokenizer.path" in done.stderr and "<redacted>" in done.stderr
    log = tmp_path / "~" / "runs #1" / "rank-00000.jsonl"
    assert log.is_file(), sorted(str(p) for p in tmp_path.rglob("*"))
    for text in (done.stderr, done.stdout, log.read_text()):
        assert "hunter22" not in text and HF not in text


def test_a_password_in_the_log_dir_of_a_run_that_succeeds_is_redacted_on_stdout_too(tmp_path: Path) -> None:
    done = run("--log-dir", str(tmp_path / "password=hunter23" / "logs"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "done; startup log:" in done.stdout and "<redacted>" in done.stdout
    assert "hunter23" not in done.stdout and "hunter23" not in done.stderr


def test_a_symlinked_rank_file_is_refused_by_name_and_its_target_is_untouched(tmp_path: Path) -> None:
    outside, logs = tmp_path / "outside.txt", tmp_path / "logs"
    outside.write_bytes(b"line 1\nunfinished")
    logs.mkdir()
    (logs / "rank-00000.jsonl").symlink_to(outside)
    for extra in ((), ("--overwrite",)):
        done = run("--log-dir", str(logs), *extra)
        assert done.returncode == 1, done.stderr[-2000:]
        assert "rank-00000.jsonl is a symbolic link" in done.stderr and "Traceback" not in done.stderr
        assert outside.read_bytes() == b"line 1\nunfinished"


HOLDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from lifecycle import InProcessPhases, Lifecycle, RunConfig
    from states import State
    lc = Lifecycle(RunConfig(), log_dir=Path(sys.argv[1]), phases=InProcessPhases(), tripwires="off",
                   run_id="run-first")
    lc.advance_to(State.CALLBACKS_BOUND)
    print("holding", flush=True)
    sys.stdin.readline()
    lc.shutdown()
""")


def test_a_second_run_into_a_log_dir_another_process_owns_is_refused_naming_that_run_and_host(
    tmp_path: Path,
) -> None:
    first = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, **ENV},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout is not None and first.stdin is not None
        assert first.stdout.readline().strip() == "holding"
        before = (tmp_path / "rank-00000.jsonl").read_bytes()
        second = run("--log-dir", str(tmp_path), "--overwrite")
        assert second.returncode == 1, second.stderr[-2000:]
        assert "in use by run 'run-first'" in second.stderr and socket.gethostname() in second.stderr
        assert (tmp_path / "rank-00000.jsonl").read_bytes() == before, "the first run's log is untouched"
        first.stdin.write("\n")
        first.stdin.flush()
        first.wait(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0
