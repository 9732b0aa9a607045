"""A `lifecycle simulate` run drives some ranks of a large job on purpose: the audit reports it as
"simulated N of M", not as missing ranks, unless ranks it declared have no log."""

from __future__ import annotations

import json
from pathlib import Path

from audit_logs import clean_events, rules, write_events

from lifecycle.audit import audit
from lifecycle.testing import as_json, text


def _simulated_ranks(log_dir: Path, ranks: list[int], world: int, *, declared: int | None = None) -> None:
    for rank in ranks:
        ev = clean_events()
        marker = ("simulation_started", dict(simulated=declared or len(ranks), selection="ranks", until="DISTRIBUTED"))
        write_events(log_dir, [ev[0], marker, *ev[1:]], rank=rank, world=world, run_id="sim-a")


def test_a_simulation_of_some_ranks_is_clean_and_reported_as_simulated_n_of_m(tmp_path: Path) -> None:
    _simulated_ranks(tmp_path, [0, 4095], 4096)
    result = audit([str(tmp_path)], jobs=1)
    assert rules(result) == set() and result.exit_code == 0
    assert text(result).startswith("audited ") and "ranks 0,4095 (2 ranks), simulated 2 of 4096: clean" in text(result)
    assert json.loads(as_json(result))["simulated"] == {"ranks": 2, "world_size": 4096}


def test_a_simulated_rank_whose_log_is_missing_is_still_reported(tmp_path: Path) -> None:
    _simulated_ranks(tmp_path, [0, 4095], 4096, declared=3)
    [finding] = audit([str(tmp_path)], jobs=1).findings
    assert finding.rule == "LA014"
    assert "a simulation of 3 of 4096 ranks left logs for only 2" in finding.message


def test_logs_that_are_not_all_simulated_still_report_missing_ranks(tmp_path: Path) -> None:
    _simulated_ranks(tmp_path, [0], 8)
    write_events(tmp_path, clean_events(), rank=1, world=8, run_id="sim-a")
    result = audit([str(tmp_path)], jobs=1)
    assert [f.rule for f in result.findings] == ["LA014"]
    assert "no log for ranks 2-7 (6 ranks)" in result.findings[0].message
    assert json.loads(as_json(result))["simulated"] is None


def test_a_simulation_record_without_a_rank_count_is_unreadable(tmp_path: Path) -> None:
    ev = clean_events()
    write_events(tmp_path, [ev[0], ("simulation_started", dict(simulated="all")), *ev[1:]], world=2)
    result = audit([str(tmp_path)], jobs=1)
    assert result.exit_code == 2
    assert "simulation_started: field 'simulated' is 'all', expected int" in str(result.errors[0])
