"""A credential on the command line or in an output path never reaches stdout or stderr: `--password X` in an
unknown-option error, and a `password=` inside an `export`/`report` output path in their `wrote ...` line."""

from __future__ import annotations

from pathlib import Path

import pytest

from lifecycle.cli import main


def test_an_unknown_password_or_token_option_is_echoed_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["audit", "logs", "--password", "hunter2x", "--api-key=s3cr3tK3y", "--token", "t0k3nX"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and "--password <redacted>" in err
    assert "hunter2x" not in err and "s3cr3tK3y" not in err and "t0k3nX" not in err


@pytest.mark.parametrize("command", [["export"], ["report"]])
def test_a_password_inside_the_output_path_is_redacted_on_stdout(
    tmp_path: Path, failed_logs: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "password=hunter22"
    folder.mkdir()
    assert main([*command, str(failed_logs), "-o", str(folder / "out.html")]) == 0
    out = capsys.readouterr().out
    assert "wrote " in out and "password=<redacted>" in out and "hunter22" not in out
    assert (folder / "out.html").stat().st_size > 0  # the file itself is where it was asked to be
