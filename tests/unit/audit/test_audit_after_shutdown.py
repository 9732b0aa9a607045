"""A resource still alive at the shutdown of a `with Lifecycle` that failed is in the shutdown record (`leaked`) and is
LA023; records written after `lifecycle_shutdown` (older logs put `resource_leaked` there) are read too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from audit_logs import engine_rank, rechain, train_and_shut_down

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
    path = tmp_path / "rank-00000.jsonl"
    assert events_after_shutdown(path) == ["transition_completed"]
    [shutdown] = [r for r in map(orjson.loads, path.read_bytes().splitlines()) if r["event"] == "lifecycle_shutdown"]
    assert shutdown["leaked"] == [{"resource": "the model", "state": "MODEL_BUILT"}]
    result = audit([str(tmp_path)], jobs=1)
    [leak] = [f for f in result.findings if f.rule == "LA023"]
    assert "'the model', made by MODEL_BUILT, was still alive after the lifecycle's shutdown" in leak.message
    assert result.exit_code == 1


def test_an_older_log_with_resource_leaked_after_its_shutdown_record_is_still_a_finding(tmp_path: Path) -> None:
    """Logs written before the shutdown record carried `leaked` have a `resource_leaked` after it."""
    with pytest.raises(RuntimeError), engine_rank(tmp_path, phases=Holding()) as lc:
        lc.advance_to(lc.target)
        raise RuntimeError("the training loop broke")

    def older(records: list[dict[str, Any]]) -> None:
        at = next(i for i, r in enumerate(records) if r["event"] == "lifecycle_shutdown")
        leaked = {**records[at], "event": "resource_leaked", "resource": "the model", "state": "MODEL_BUILT"}
        del records[at]["leaked"], leaked["leaked"], leaked["source"]
        records.insert(at + 1, leaked)
        for seq, rec in enumerate(records):
            rec["seq"] = seq

    path = tmp_path / "rank-00000.jsonl"
    rechain(path, older)
    assert events_after_shutdown(path) == ["resource_leaked", "transition_completed"]
    [leak] = [f for f in audit([str(tmp_path)], jobs=1).findings if f.rule == "LA023"]
    assert "'the model', made by MODEL_BUILT, was still alive after the lifecycle's shutdown" in leak.message


def test_a_clean_shutdown_that_releases_everything_has_no_leak(tmp_path: Path) -> None:
    train_and_shut_down(engine_rank(tmp_path))
    assert not [f for f in audit([str(tmp_path)], jobs=1).findings if f.rule == "LA023"]
