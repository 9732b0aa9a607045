"""Blame, critical chain and stragglers on logs with known timings; memory that grows with ranks,
not records."""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

import pytest

from lifecycle.audit import audit, blame, critical_chain, stragglers

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.audit import BASE_S, write_run


@pytest.fixture(scope="module")
def timed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 ranks; rank 9 builds its model 10x slower than the others."""
    log_dir = tmp_path_factory.mktemp("timed")
    write_run(log_dir, 12, steps=1, faults={9: "straggler"})
    return log_dir


def test_blame_orders_states_by_their_slowest_rank_and_reports_the_median(timed: Path) -> None:
    rows = blame(audit([str(timed)], jobs=1).ranks)
    assert rows[0].state == "MODEL_BUILT" and rows[0].slowest_rank == 9
    assert rows[0].max == pytest.approx(10 * BASE_S["build_model"] * (1 + 9 / 500))
    assert rows[0].median == pytest.approx(BASE_S["build_model"], rel=0.03)
    assert [r.state for r in rows][1:3] == ["DISTRIBUTED", "SERVICES_READY"]


def test_the_critical_chain_follows_the_last_rank_to_reach_each_state(timed: Path) -> None:
    chain = critical_chain(audit([str(timed)], jobs=1).ranks)
    assert [link.state for link in chain] == [
        "VALIDATED",
        "SERVICES_READY",
        "DISTRIBUTED",
        "MODEL_BUILT",
        "CALLBACKS_BOUND",
        "SHUT_DOWN",
    ]
    by_state = {link.state: link for link in chain}
    assert by_state["MODEL_BUILT"].rank == 9 and by_state["CALLBACKS_BOUND"].rank == 9
    assert by_state["MODEL_BUILT"].at > by_state["DISTRIBUTED"].at + by_state["MODEL_BUILT"].duration - 0.5


def test_only_the_slow_rank_is_a_straggler(timed: Path) -> None:
    found = stragglers(audit([str(timed)], jobs=1).ranks)
    assert [(s.rank, s.state) for s in found] == [(9, "MODEL_BUILT")]
    assert found[0].factor == pytest.approx(10, rel=0.05)


def test_memory_grows_with_ranks_not_with_records(tmp_path: Path) -> None:
    def peak(log_dir: Path) -> int:
        tracemalloc.start()
        audit([str(log_dir)], jobs=1)
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    write_run(tmp_path / "short", 16, steps=20)
    write_run(tmp_path / "long", 16, steps=2000)
    size = sum(p.stat().st_size for p in (tmp_path / "long").glob("*.jsonl"))
    short, long = peak(tmp_path / "short"), peak(tmp_path / "long")
    assert long < size / 4  # never the whole input in memory
    assert long < short + 3 * size / 16  # at most about one rank's file at a time beyond the summaries
