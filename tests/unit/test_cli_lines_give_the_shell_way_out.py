"""The errors a Lifecycle raises tell a library caller what to call next; `lifecycle COMMAND` prints
them to a person at a shell, who is told what to run or change instead. Each message here is the
engine's own, raised by a real in-process lifecycle, so that a change of its wording that the CLI
no longer recognises fails here (the CLI's processes: tests/integration/test_cli_lines_end_with_a_full_stop.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from lifecycle import InProcessPhases, LifecycleError
from lifecycle.cli import finished
from states import State
from tests.unit.test_engine_failures import disk_full_after

API_CALL = re.compile(r"[A-Za-z_]\w*\(\)|Lifecycle\(|a new Lifecycle")


def _said(fail: Any) -> tuple[str, str]:
    with pytest.raises(LifecycleError) as caught:
        fail()
    return str(caught.value), finished(str(caught.value))


def test_a_failed_phase_says_run_again_not_restart_or_shutdown(make_lc: Any) -> None:
    lc = make_lc(phases=InProcessPhases(fail_on="build_model"))
    raw, line = _said(lambda: lc.advance_to(State.CALLBACKS_BOUND))
    assert "call restart() or shutdown()" in raw  # the library caller's way out
    assert line.endswith("Everything it started was released; fix the cause and run the command again.")
    assert not API_CALL.search(line), line


def test_a_failure_before_validation_says_fix_it_and_run_again_not_create_a_new_lifecycle(make_lc: Any) -> None:
    lc = make_lc(phases=InProcessPhases(fail_on="validate"))
    raw, line = _said(lc.validate)
    assert "create a new Lifecycle" in raw
    assert line.endswith(". Fix the config and run the command again.") and ".." not in line
    assert not API_CALL.search(line), line


def test_a_full_log_disk_says_free_it_or_choose_another_log_dir_not_call_shutdown(
    make_lc: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    lc = make_lc()
    lc.advance_to(State.SERVICES_READY)
    disk_full_after(monkeypatch, 0)
    raw, line = _said(lambda: lc.advance_to(State.CALLBACKS_BOUND))
    monkeypatch.undo()
    assert "call shutdown()" in raw
    assert "The lifecycle is FAILED and released everything; free the disk or choose another logging.log_dir" in line
    assert line.endswith(".") and not API_CALL.search(line), line
