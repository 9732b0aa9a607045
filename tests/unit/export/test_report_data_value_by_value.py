"""What the HTML report's data promises, checked value by value (each test kills mutants of
`lifecycle/export/_report.py` and `_rows.py` that test_export_report.py let through): where the
root cause was logged, the rows of a job just past the per-rank limit, the counts across the ranks,
group labels that name exactly their ranks, and rule URLs that cannot become a script."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from lifecycle.cli import main
from lifecycle.export import load
from lifecycle.testing import report_data, rows, rules_url_problem, write_report


def test_the_report_says_where_the_cause_was_logged_and_how_many_records_it_read(failed_logs: Path) -> None:
    trace = load([str(failed_logs)])
    data = report_data(trace)
    [cause] = data["causes"]
    path, line = str(cause["where"]).rsplit(":", 1)
    assert Path(path).name == "rank-00002.jsonl" and cause["at"] == 5.0
    assert b'"transition_failed"' in Path(path).read_bytes().splitlines()[int(line) - 1]
    assert data["records"] == sum(len(p.read_bytes().splitlines()) for p in failed_logs.glob("rank-*.jsonl"))
    assert (data["title"], data["world_size"], data["ranks"]) == ("startup of run run-k", 4, 4)
    assert data["states"][:2] == ["imports", "VALIDATED"]  # a lane per state with entry work: none in CONFIGURED
    assert [5.0, "failure", "transition_failed"] in [m[:3] for m in data["rows"][2]["marks"]]  # since the first record
    assert data["rows"][2]["bars"] == [["VALIDATED", 0.25, 0.75, 0], ["SERVICES_READY", 1.0, 1.75, 0]]
    stopped = data["rows"][3]
    assert (stopped["outlier"], stopped["failure"][:2]) == ("startup timeout", [10.0, "timeout"])
    assert stopped["unfinished"] == ["init_distributed", 2.0, 10.0]  # from its start to the timeout


def test_a_job_one_rank_past_the_per_rank_limit_is_aggregated(failed_logs: Path) -> None:
    """At 4 ranks and a limit of 4 a row per rank; at a limit of 3 the rows are aggregated (here
    every rank failed, so each is an outlier of its own) and the page says so."""
    trace = load([str(failed_logs)])
    at_limit, past = report_data(trace, per_rank_up_to=4), report_data(trace, per_rank_up_to=3)
    assert not at_limit["aggregated"] and past["aggregated"]
    assert [r["outlier"] for r in at_limit["rows"]] == [r["outlier"] for r in past["rows"]]
    assert [r["ranks"] for r in past["rows"]] == [[0], [1], [2], [3]]


def _with_counts(log_dir: Path, counts: list[int]) -> Path:
    from export_logs import clean_events, clock, write_events

    for rank, made in enumerate(counts):
        ev = clean_events()
        simulated = {"placement": {}, "agrees": True, "mismatches": [], "parameters": None}
        ev.insert(-2, ("rank_simulated", {**simulated, "counts": {"DISTRIBUTED": {"process_groups": made}}}))
        with clock(100.0 + i for i in range(len(ev))):
            write_events(log_dir, ev, rank=rank, world=len(counts), run_id="run-s")
    return log_dir


def test_the_counts_of_a_state_are_its_median_and_max_across_the_ranks(tmp_path: Path) -> None:
    data = report_data(load([str(_with_counts(tmp_path, [10, 1, 3, 2]))]))
    distributed = next(b for b in data["blame"] if b["state"] == "DISTRIBUTED")
    assert distributed["counts"] == {"process_groups": [3, 10]}  # sorted 1, 2, 3, 10: the upper median


def _expand(label: str) -> tuple[int, list[int], int]:
    """A group's label `N ranks: a-b,c,… (k more runs)`: N, the ranks its runs name, k."""
    count, runs = label.split(" ranks: ")
    more = 0
    if runs.endswith(" more runs)"):
        runs, rest = runs.split(",… (")
        more = int(rest.split()[0])
    named: list[int] = []
    for run in runs.split(","):
        first, _, last = run.partition("-")
        named += range(int(first), int(last or first) + 1)
    return int(count), named, more


def _runs(ranks: list[int]) -> int:
    return sum(1 for i, r in enumerate(ranks) if i == 0 or r != ranks[i - 1] + 1)


def test_a_group_row_is_labelled_with_exactly_the_ranks_it_stands_for(tmp_path: Path) -> None:
    from benchmarks.audit import write_run

    write_run(tmp_path, 512, steps=1)
    groups = [row for row in rows(load([str(tmp_path)])) if len(row.ranks) > 1]
    assert groups
    for row in groups:
        count, named, more = _expand(row.label)
        ranks = sorted(row.ranks)
        assert count == len(ranks) and named == ranks[: len(named)], row.label
        assert _runs(named) + more == _runs(ranks) and (more == 0) == (named == ranks), row.label
        assert _runs(named) == min(6, _runs(ranks)), row.label  # at most six runs are spelled out
        assert ("more runs)" in row.label) == (_runs(ranks) > 6), row.label  # and only the rest counted


@pytest.mark.parametrize("url", ["docs/rules\x1f/", "docs/rules\x7f/", "docs/ru les/", "https://x/\x00"])
def test_a_rules_url_with_a_control_character_or_a_space_is_refused(url: str) -> None:
    problem = rules_url_problem(url)
    assert problem is not None and "space or a control character" in problem


def test_a_rules_url_of_printable_characters_up_to_the_tilde_is_taken(tmp_path: Path, failed_logs: Path) -> None:
    url = "https://example.org/r!ules~/"
    assert rules_url_problem(url) is None
    out = tmp_path / "r.html"
    assert main(["report", str(failed_logs), "-o", str(out), "--rules-url", url]) == 0
    page: Any = out.read_bytes()
    assert b"https://example.org/r!ules~/LA012.md" in page


def _fleet(log_dir: Path, validate_s: list[float], *, died: int = 0) -> Path:
    """A rank per entry of `validate_s`, each validating for that long and shutting down; then
    `died` more ranks whose logs stop in the middle of validating."""
    from benchmarks.audit import ChainWriter

    t, fp, world = 1.7e9, "f" * 64, len(validate_s) + died
    started = {"plan": "training", "target": "CALLBACKS_BOUND", "policy": "raise", "pid": 1, "host": "h"}
    for rank in range(world):
        w = ChainWriter("run-g", rank, world)
        w.emit(t, "lifecycle_started", **started)
        w.emit(t, "transition_started", trigger="validate", source="CONFIGURED")
        if rank < len(validate_s):
            end = t + validate_s[rank]
            w.emit(end, "config_validated", fingerprint=fp, config={}, environment=True)
            done = {"source": "CONFIGURED", "dest": "VALIDATED", "duration_s": end - t, "config_fingerprint": None}
            w.emit(end, "transition_completed", trigger="validate", **done)
            w.emit(end, "lifecycle_shutdown", source="VALIDATED")
            shut = {"source": "VALIDATED", "dest": "SHUT_DOWN", "duration_s": 0.0, "config_fingerprint": fp}
            w.emit(end, "transition_completed", trigger="shutdown", **shut)
        (log_dir / f"rank-{rank:05d}.jsonl").write_bytes(b"".join(w.lines))
    return log_dir


def test_ranks_half_as_slow_again_share_no_row_with_the_others(tmp_path: Path) -> None:
    """Ranks 0 and 11 take 0.1 s, the others 0.15 s: two rows, in the order of their first ranks."""
    found = rows(load([str(_fleet(tmp_path, [0.1] + [0.15] * 10 + [0.1]))]), per_rank_up_to=2)
    assert [(row.label, row.outlier) for row in found] == [
        ("2 ranks: 0,11", None),
        ("9 ranks: 2-10", None),
        ("rank 1", "critical chain"),  # the slowest rank, on a row of its own
    ]


@pytest.mark.parametrize("median", [2**-1.125, 2**0.0625])  # 0.46 s and 1.04 s
def test_ranks_within_5_percent_of_the_median_share_its_row_shown_by_a_median_rank(
    tmp_path: Path, median: float
) -> None:
    times = [median] * 6 + [0.95 * median] * 5 + [1.05 * median] * 2  # the median of 12: the 7th, a `median`
    found = rows(load([str(_fleet(tmp_path, times))]), per_rank_up_to=2)
    assert [(row.ranks, row.outlier) for row in found] == [
        ((0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12), None),
        ((11,), "critical chain"),
    ]
    assert found[0].shown.rank == 0  # the group's most typical rank draws its bars


def test_ranks_whose_states_took_no_measurable_time_share_one_row(tmp_path: Path) -> None:
    found = rows(trace=load([str(_fleet(tmp_path, [0.0] * 6))]), per_rank_up_to=2)
    assert [(row.label, row.outlier) for row in found] == [("5 ranks: 1-5", None), ("rank 0", "critical chain")]


@pytest.mark.parametrize("faster", [47, 48])
def test_the_bins_widen_only_until_the_groups_fit_in_48_rows(tmp_path: Path, faster: int) -> None:
    """50 ranks at the median time (one of them the critical chain's, a row apart) and 47 or 48
    faster ones, each a quarter octave apart: 48 groups at the finest bins fit; 49 widen once (to
    half an octave), no further."""
    times = [64.0] * 50 + [64 * 2 ** (-(i + 1) / 4) for i in range(faster)]
    found = rows(load([str(_fleet(tmp_path, times))]), per_rank_up_to=2)
    groups = [row for row in found if not row.outlier]
    assert [row.ranks for row in found if row.outlier] == [(0,)]  # the critical chain's rank
    assert sorted(r for row in found for r in row.ranks) == list(range(len(times)))
    assert len(groups) == 48 if faster == 47 else 24 < len(groups) < 48
    for row in groups:  # a rank alone has its own label; more are counted and listed
        named = _expand(row.label)[1] if len(row.ranks) > 1 else [int(row.label.removeprefix("rank "))]
        assert named == list(row.ranks), row.label


def test_at_most_32_ranks_that_stand_out_get_rows_of_their_own(tmp_path: Path) -> None:
    found = rows(load([str(_fleet(tmp_path, [1.0] * 8, died=40))]), per_rank_up_to=2)
    outliers = [row for row in found if row.outlier]
    assert len(outliers) <= 32 and {row.outlier for row in outliers} == {"startup died", "critical chain"}
    assert sorted(r for row in found for r in row.ranks) == list(range(48))


def test_by_default_a_job_of_64_ranks_gets_a_row_per_rank_and_one_of_65_is_aggregated(tmp_path: Path) -> None:
    """docs/observability.md: up to 64 ranks, one row per rank (report_data and write_report alike)."""
    from benchmarks.audit import write_run

    for world in (64, 65):
        write_run(tmp_path / str(world), world, steps=1)
        trace = load([str(tmp_path / str(world))])
        page = write_report(trace=trace, output=tmp_path / f"{world}.html").read_text()
        shown = orjson.loads(page.split('<script type="application/json" id="data">')[1].split("</script>")[0])
        assert report_data(trace=trace)["aggregated"] == shown["aggregated"] == (world > 64)
        assert (len(rows(trace)) == world) == (world <= 64)


def test_another_html_page_is_not_written_over_but_our_report_is(tmp_path: Path, failed_logs: Path) -> None:
    page = tmp_path / "index.html"
    page.write_text("<!DOCTYPE html>\n<html><title>the team's dashboard</title></html>\n")
    assert main(["report", str(failed_logs), "-o", str(page)]) == 2
    assert "dashboard" in page.read_text()
    ours = tmp_path / "report.html"
    assert main(["report", str(failed_logs), "-o", str(ours)]) == 0
    assert main(["report", str(failed_logs), "-o", str(ours)]) == 0


def test_the_report_says_when_each_restart_cycle_started(tmp_path: Path) -> None:
    from export_logs import clean_events, clock, write_events

    for start, attempt in ((100.0, 0), (200.0, 1)):  # the same run id: the file continued, as after a restart
        ev = clean_events()
        ev[0][1]["attempt"] = attempt
        with clock(start + i for i in range(len(ev))):
            write_events(tmp_path, ev, run_id="r")
    cycles = report_data(load([str(tmp_path)]))["cycles"]
    assert [(c["attempt"], c["start"]) for c in cycles] == [(0, 0.0), (1, 100.0)]  # since the first record
