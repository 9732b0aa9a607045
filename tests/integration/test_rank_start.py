"""How `run_ranks` starts ranks (`start_method`): forked from a server that imported torch and
megatron-core once, or spawned as fresh interpreters; either way each rank has the caller's
environment as it is at the call, not as it was when the server started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lifecycle.launchers.local import run_ranks

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.release_independent  # the same on every release: the floor skips it (scripts/test)
MARK = "LIFECYCLE_TEST_RANK_START_MARK"


def _what_the_rank_sees() -> dict[str, object]:
    return {
        "mark": os.environ.get(MARK),
        "rank": os.environ["RANK"],
        "torch_already_imported": "torch" in sys.modules,
        "megatron_already_imported": "megatron.core" in sys.modules,
    }


def _registers_an_exit_hook(path: str) -> int:
    import atexit

    atexit.register(lambda: Path(path, f"rank-{os.environ['RANK']}").write_text("at exit"))
    return os.getpid()


@pytest.mark.parametrize("start", ["forkserver", "spawn"])
def test_a_ranks_exit_runs_its_atexit_hooks_however_it_was_started(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, start: str
) -> None:
    """What a rank leaves to interpreter exit (a lifecycle left open is shut down then) runs: a
    forked rank is ended by the server with os._exit, which would skip it."""
    monkeypatch.setenv("LIFECYCLE_RANKS_START", start)
    run_ranks(_registers_an_exit_hook, 2, str(tmp_path), timeout_s=300)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank-0", "rank-1"]


def _an_unseeded_numpy_draw() -> int:
    import numpy

    return int(numpy.random.randint(2**62))


@pytest.mark.parametrize("start", ["forkserver", "spawn"])
def test_an_unseeded_numpy_draw_differs_between_ranks_and_between_runs_as_in_launched_ranks(
    monkeypatch: pytest.MonkeyPatch, start: str
) -> None:
    """A rank that draws from NumPy's global generator without seeding it gets what a fresh
    interpreter would: a seed from the OS, not the fork server's state shared by every rank."""
    monkeypatch.setenv("LIFECYCLE_RANKS_START", start)
    draws = run_ranks(_an_unseeded_numpy_draw, 2, timeout_s=300) + run_ranks(_an_unseeded_numpy_draw, 2, timeout_s=300)
    assert len(set(draws)) == 4, draws


@pytest.mark.parametrize("start", ["forkserver", "spawn"])
def test_each_rank_has_the_callers_environment_at_the_call(monkeypatch: pytest.MonkeyPatch, start: str) -> None:
    monkeypatch.setenv("LIFECYCLE_RANKS_START", start)
    monkeypatch.setenv(MARK, "first")
    first = run_ranks(_what_the_rank_sees, 2, timeout_s=300)  # a server started now has "first"
    monkeypatch.setenv(MARK, "second")
    second = run_ranks(_what_the_rank_sees, 2, timeout_s=300)
    monkeypatch.delenv(MARK)
    third = run_ranks(_what_the_rank_sees, 1, timeout_s=300)
    assert [(r["rank"], r["mark"]) for r in first] == [("0", "first"), ("1", "first")]
    assert [(r["rank"], r["mark"]) for r in second] == [("0", "second"), ("1", "second")]
    assert third[0]["mark"] is None


@pytest.mark.parametrize("start", ["forkserver", "spawn"])
def test_forked_ranks_find_torch_and_megatron_imported_and_spawned_ones_do_not(
    monkeypatch: pytest.MonkeyPatch, start: str
) -> None:
    monkeypatch.setenv("LIFECYCLE_RANKS_START", start)
    [seen] = run_ranks(_what_the_rank_sees, 1, timeout_s=300)
    preloaded = start == "forkserver"
    assert (seen["torch_already_imported"], seen["megatron_already_imported"]) == (preloaded, preloaded)


def test_the_fork_server_prints_nothing_to_the_owners_terminal(tmp_path: Path) -> None:
    """What importing megatron-core prints (its warnings that Transformer Engine and Apex are absent)
    goes to each rank's own output when spawned; the fork server that imports it for the ranks
    prints none of it to the process that owns it."""
    code = (
        "from lifecycle.launchers.local import run_ranks\n"
        "from tests.integration.test_rank_start import _what_the_rank_sees\n"
        "print(run_ranks(_what_the_rank_sees, 2, timeout_s=300)[1]['rank'])\n"
    )
    env = {**os.environ, "LIFECYCLE_RANKS_START": "forkserver", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert (done.returncode, done.stdout) == (0, "1\n"), done.stderr[-3000:]
    assert done.stderr == ""
