"""An in-process restart cycle that re-formed a smaller world than was launched (`min_world_size`
let it) is a finding on every rank of that cycle (LA025); a whole world is none."""

from __future__ import annotations

from pathlib import Path

from audit_logs import engine_rank

from lifecycle.audit import audit
from lifecycle.log import records


def cycles(log_dir: Path, worlds: list[int], launched: int = 2) -> list[str]:
    """Rank 0's cycles, each training with `worlds[i]` ranks of `launched`."""
    lc = engine_rank(log_dir, 0, launched)
    for cycle, world in enumerate(worlds):
        if cycle:
            lc.end_cycle(cause_rank=1, cause="RuntimeError: lost", fault_ts=None)
            lc.restart()
        lc.begin_cycle(cycle)
        lc.advance_to(lc.target)
        lc.cycle_trained(world_size=world, launched_world_size=launched)
        lc.record(records.StepCompleted(step=1, loss=1.0, duration_s=0.01))
        lc.record(records.FirstStepFinalized(finalizer_calls=1))
    lc.shutdown()
    result = audit([str(log_dir / "rank-00000.jsonl")], jobs=1)
    return [f.message for f in result.findings if f.rule == "LA025"]


def test_a_cycle_with_fewer_ranks_than_launched_is_a_finding_naming_both_sizes(tmp_path: Path) -> None:
    [message] = cycles(tmp_path, [2, 1])
    assert message.startswith("cycle 1 trained with 1 of the 2 ranks launched")
    assert "leave min_world_size out to keep the job whole" in message


def test_cycles_with_every_rank_launched_are_no_finding(tmp_path: Path) -> None:
    assert cycles(tmp_path, [2, 2]) == []
