"""The export keeps at most 100,000 steps of a rank, the first ones, on each of its paths: the first
rank's log read again (here one by one: its last line is cut mid-record, so neither the file nor its
steps decode at once), the others' steps taken from the audit's typed records batch by batch (at once
where a batch holds each field, else one by one). A file of its own, listed last for the mutants of
`lifecycle/export/_details.py`: writing and reading 200,000 records takes seconds."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.audit import ChainWriter
from lifecycle.export import load

T = 1.7e9
CAP = 100_000
RUN = 1_000
"""More lines than the audit reads a batch (512): a run of them holds the start of a batch."""


def _steps(w: ChainWriter, numbers: range, **odd: object) -> None:
    for step in numbers:
        fields = {"step": step, "loss": 0.5, "duration_s": 0.25, **(odd if step == numbers[0] else {})}
        w.emit(T + 1 + step / 1024, "step_completed", **fields)


def test_a_rank_keeps_its_first_100000_steps_whichever_way_they_are_read(tmp_path: Path) -> None:
    first = ChainWriter("run-s", 0, 2)
    first.emit(T, "lifecycle_started", plan="training", target="CALLBACKS_BOUND", policy="raise")
    _steps(first, range(CAP + 2))
    other = ChainWriter("run-s", 1, 2)
    other.emit(T, "lifecycle_started", plan="training", target="CALLBACKS_BOUND", policy="raise")
    _steps(other, range(CAP - 1))
    for i in range(RUN):  # a batch starts in these, with one step left to keep
        other.emit(
            T + 1 + (CAP - 1.5) / 1024, "warning", category="UserWarning", module="x", message=f"w{i}", lineno=None
        )
    _steps(other, range(CAP - 1, CAP + RUN))  # the usual types: a batch at once
    _steps(other, range(CAP + RUN, CAP + 2 * RUN), loss=None)  # a step without a loss: its batch one by one
    for w in (first, other):
        (tmp_path / f"rank-{w.base['rank']:05d}.jsonl").write_bytes(b"".join(w.lines))
    cut = tmp_path / "rank-00000.jsonl"
    cut.write_bytes(cut.read_bytes()[:-40])  # the rank died writing its last step
    for rank in load([str(tmp_path)]).ranks:
        assert len(rank.steps) == CAP, rank.rank
        assert rank.steps[-1] == (T + 1 + (CAP - 1) / 1024, CAP - 1, 0.5, 0.25), rank.rank
