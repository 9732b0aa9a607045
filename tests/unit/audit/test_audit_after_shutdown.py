"""Records written after `lifecycle_shutdown` are read: a resource still alive at the shutdown of a `with Lifecycle`
that failed (the ledger logs it after the shutdown record) is LA023."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from audit_logs import engine_rank, train_and_shut_down

from lifecycle import InProcessPhases, Runtime
from lifecycle.audit import audit
from states import State


class Holding(InProcessPhases):
    """MODEL_BUILT makes `the model`, which nothing ever releases (a reference kept by user code)."""

    def resources(self, state: State, runtime: Runtime) -> list[tuple[str, Any]]:
        return [("the model", lambda: False)] if state is State.MODEL_BUILT else []


def events_after_shutdown(path: Path) -> list[str]:
    names = [orjson.loads(line)["event"] for line in path.read_bytes().splitlines()]
    return names[names.index("lifecycle_shutdown") + 1 :]


def test_a_resource_alive_at_the_shutdown_of_a_failed_with_block_is_a_finding(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="the training loop broke"), engine_rank(tmp_path, phases=Holding()) as lc:
        lc.advance_to(lc.target)
        raise RuntimeError("the training loop broke")
    assert "resource_leaked" in events_after_shutdown(tmp_path / "rank-00000.jsonl")
    result = audit([str(tmp_path)], jobs=1)
    [leak] = [f for f in result.findings if f.rule == "LA023"]
    assert "'the model', made by MODEL_BUILT, was still alive after the lifecycle's shutdown" in leak.message
    assert result.exit_code == 1


def test_a_clean_shutdown_that_releases_everything_has_no_leak(tmp_path: Path) -> None:
    train_and_shut_down(engine_rank(tmp_path))
    assert not [f for f in audit([str(tmp_path)], jobs=1).findings if f.rule == "LA023"]
