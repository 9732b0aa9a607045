"""Every line `lifecycle COMMAND` prints for a person at a shell is a finished sentence that says what
to run or change there: it ends with a full stop, and it never tells the person to call a Python
API (`restart()`, `shutdown()`, `Lifecycle(...)`), even where the error under it was written for a
library caller. Each case is a real refusal or failure of the command: those that start a rank run as a
process each, the others one after another in one process (`run_lifecycle_many`)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.child_python import run_lifecycle, run_lifecycle_many

pytestmark = [pytest.mark.slow, pytest.mark.release_independent]  # the CLI's own lines

API_CALL = re.compile(r"[A-Za-z_]\w*\((?:\.\.\.)?\)|Lifecycle\(")
"""A Python call in the text: `restart()`, `lc.shutdown()`, `Lifecycle(...)`."""
STARTS_A_RANK = {
    "run: validation fails in the rank (FAILED, nothing validated)",
    "run: the model fails to build (FAILED after VALIDATED)",
}
"""The cases whose command starts a rank (its distributed state is the process's): a process each."""
FINISHED = (".", "?")  # a full stop; a question ("did you mean 'parallel.tp'?") ends as a question


def _cases(tmp: Path) -> dict[str, tuple[list[str], int]]:
    """name -> (arguments, exit status); every one refused or failed."""
    missing = str(tmp / "no-such-dir")
    taken = tmp / "taken"
    taken.mkdir()
    (tmp / "bad.yaml").write_text("model: [unclosed\n")
    provider = tmp / "fails.py"
    provider.write_text(
        "def provider(config, *, pre_process, post_process, vp_stage, inputs):\n"
        "    raise RuntimeError('injected: the model cannot be built')\n"
    )
    return {
        "run: a flag's bad value": (["run", "--steps", "-1"], 2),
        "run: a value outside its field's domain": (["run", "--set", "training.steps=-1"], 2),
        "run: an unknown config key": (["run", "--set", "no.such_field=1"], 2),
        "run: a missing config file": (["run", "--config", str(tmp / "missing.yaml")], 2),
        "run: a config file that is not YAML": (["run", "--config", str(tmp / "bad.yaml")], 2),
        "run: a provider that names nothing": (["run", "--provider", "tests.integration.hostile_callables:nope"], 2),
        "run: --phases that is not module:function": (["run", "--phases", "phases.py"], 2),
        "run: validation fails before a launch": (
            ["run", "--nproc", "2", "--set", "parallel.tp=3", "--log-dir", str(tmp / "l1")],
            1,
        ),
        "run: validation fails in the rank (FAILED, nothing validated)": (
            ["run", "--set", "parallel.tp=3", "--log-dir", str(tmp / "l2")],
            1,
        ),
        "run: the model fails to build (FAILED after VALIDATED)": (
            ["run", "--steps", "0", "--provider", f"{provider}:provider", "--log-dir", str(tmp / "l3")],
            1,
        ),
        "audit: a missing log directory": (["audit", missing], 2),
        "audit: --follow without --format verdict": (["audit", "--follow", missing], 2),
        "audit: an unknown rule": (["audit", "--select", "LA999", missing], 2),
        "export: a missing log directory": (["export", missing, "--output", str(tmp / "t.json")], 2),
        "export: --follow with the chrome format": (["export", "--follow", missing, "--output", str(tmp / "t")], 2),
        "report: a missing log directory": (["report", missing, "--output", str(tmp / "r.html")], 2),
        "plot: a missing log directory": (["plot", missing, "--output", str(tmp / "p.png")], 2),
        "simulate: --ranks with --scale": (["simulate", "--preset", "gpt-4096", "--scale", "--ranks", "0"], 2),
        "simulate: a layout that does not divide the job": (
            ["simulate", "--preset", "tiny-gpt", "--world-size", "6", "--set", "parallel.tp=4"],
            1,
        ),
        "check-binding: a provider that names nothing": (
            ["check-binding", "--provider", "tests.integration.hostile_callables:nope"],
            2,
        ),
        "verify-resume: --keep names a directory that exists": (["verify-resume", "--keep", str(taken)], 2),
        "graph: an unknown format": (["graph", "--format", "png"], 2),
    }


def _said(command: str, output: str) -> list[str]:
    """The command's own lines (`lifecycle COMMAND: ...`) and the indented lines that continue them."""
    lines, inside = [], False
    for line in output.splitlines():
        inside = line.startswith(f"lifecycle {command}:") or (inside and line.startswith("  "))
        if inside:
            lines.append(line)
    return lines


Ran = dict[str, tuple[int, "subprocess.CompletedProcess[str]"]]


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    """Every case run once: name -> (the exit status it must have, what the command did)."""
    cases = _cases(tmp_path_factory.mktemp("cli-lines"))
    alone = {name: run_lifecycle(*cases[name][0]) for name in STARTS_A_RANK}
    batch = [name for name in cases if name not in STARTS_A_RANK]
    done = {**alone, **dict(zip(batch, run_lifecycle_many(*(cases[name][0] for name in batch)), strict=True))}
    return {name: (status, done[name]) for name, (_argv, status) in cases.items()}


def test_every_refusal_and_failure_line_ends_with_a_full_stop_and_gives_no_api_advice(ran: Ran) -> None:
    wrong = []
    for name, (status, done) in ran.items():
        lines = _said(name.partition(":")[0], done.stdout + done.stderr)
        assert done.returncode == status, (name, done.returncode, done.stderr[-2000:])
        assert lines, (name, done.stderr[-2000:])  # something is said, in the command's name
        wrong += [(name, line) for line in lines if not line.endswith(FINISHED) or API_CALL.search(line)]
    assert wrong == []


def test_a_failed_startup_tells_a_shell_user_to_run_again_not_to_call_restart(ran: Ran) -> None:
    _status, done = ran["run: the model fails to build (FAILED after VALIDATED)"]
    [line] = [x for x in done.stderr.splitlines() if x.startswith("lifecycle run: rank 0 failed: ")]
    assert "RuntimeError: injected: the model cannot be built" in line
    assert line.endswith("Everything it started was released; fix the cause and run the command again."), line
    assert "restart" not in line and "shutdown" not in line
