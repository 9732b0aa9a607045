"""Root cause and victims (lifecycle.audit._cause) decided on synthetic ranks: each stands for one
rank's audited log (what RankAudit hands over: its rank, run id, first record's time, source and
first failure), so the ordering rules are pinned down one by one. tests/unit/audit/test_audit_cause.py
shows the same rules end to end, on logs the real AuditLog wrote.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import pytest

from lifecycle.audit import root_causes
from lifecycle.testing import Failure, RootCause, Victim


@dataclass
class Stream:
    """The part of a RankAudit that the root cause reads."""

    rank: int | None
    failure: Failure | None = None
    first_ts: float | None = 100.0
    records: int = 5
    run_id: str | None = "run-s"
    source: str = ""

    def __post_init__(self) -> None:
        self.source = self.source or f"logs/rank-{self.rank or 0:05d}.jsonl"


def fail(kind: str, ts: float | None, **extra: Any) -> Failure:
    return Failure(kind=kind, message=f"{kind} at {ts}", ts=ts, line=7, state="DISTRIBUTED", **extra)


def cause(*streams: Stream) -> RootCause:
    [found] = root_causes(streams)  # type: ignore[arg-type]
    return found


def test_the_earliest_own_failure_wins_whatever_its_kind_and_rank() -> None:
    found = cause(Stream(0, fail("failed", 110.0)), Stream(1, fail("timeout", 105.0)), Stream(2, fail("died", 107.0)))
    assert (found.rank, found.kind, found.line) == (1, "timeout", 7)
    assert [(v.rank, v.kind) for v in found.victims] == [(0, "failed"), (2, "died")]


def test_equal_times_go_to_the_kind_order_then_to_the_lower_rank_in_any_input_order() -> None:
    streams = [Stream(3, fail("failed", 120.0)), Stream(2, fail("failed", 120.0)), Stream(1, fail("died", 120.0))]
    assert cause(*streams).rank == 2
    assert cause(*reversed(streams)).rank == 2
    assert cause(Stream(5, fail("timeout", 9.0)), Stream(4, fail("timeout", 9.0))).rank == 4


def test_a_failure_without_a_time_comes_after_every_timed_one() -> None:
    found = cause(Stream(0, fail("failed", None)), Stream(1, fail("timeout", 300.0)))
    assert (found.rank, found.at) == (1, 200.0)
    assert cause(Stream(0, fail("failed", None))).at is None


def test_at_is_seconds_after_the_runs_first_record_and_never_negative() -> None:
    found = cause(Stream(0, fail("failed", 103.5), first_ts=101.0), Stream(1, first_ts=100.0))
    assert found.at == pytest.approx(3.5)
    # the clock stepped back after the first record (LA017): the cause is at the start, not before it
    assert cause(Stream(0, fail("failed", 99.25), first_ts=100.0)).at == 0.0


def test_a_stream_without_a_rank_or_without_records_takes_no_part() -> None:
    found = cause(Stream(None, fail("failed", 50.0), first_ts=50.0), Stream(0, fail("died", 200.0)))
    assert (found.rank, found.at, found.victims) == (0, 100.0, ())
    assert root_causes([Stream(None, fail("failed", 50.0))]) == []  # type: ignore[list-item]


def test_streams_of_other_runs_are_causes_of_their_own_runs_only() -> None:
    causes = root_causes(
        [
            Stream(0, fail("failed", 5.0), run_id="a"),  # type: ignore[list-item]
            Stream(1, fail("failed", 1.0), run_id="b"),
            Stream(1, run_id="a"),
        ]
    )
    assert [(c.run_id, c.rank, c.victims) for c in causes] == [("a", 0, ()), ("b", 1, ())]
    assert root_causes([Stream(0), Stream(1)]) == []  # type: ignore[list-item]


def test_victims_exclude_only_the_cause_and_are_sorted_by_rank() -> None:
    found = cause(
        Stream(3, fail("aborted", 90.0, signal="SIGTERM")),
        Stream(2, fail("failed", 100.0)),
        Stream(0, fail("peer_failed", 95.0, peer=2)),
        Stream(1),
    )
    assert found.rank == 2
    assert [(v.rank, v.kind, v.signal) for v in found.victims] == [(0, "peer_failed", None), (3, "aborted", "SIGTERM")]


def test_the_earliest_peer_failed_names_the_cause_when_no_rank_failed_on_its_own() -> None:
    found = cause(
        Stream(0, fail("peer_failed", 20.0, peer=2)),
        Stream(1, fail("peer_failed", 10.0, peer=3)),
        Stream(4, fail("aborted", 5.0, signal="SIGTERM")),
    )
    assert (found.rank, found.kind) == (3, "peer")
    assert found.message == "named by rank 1's peer_failed record; no log of it was given"
    assert (found.source, found.line, found.at) == (None, None, None)
    assert [(v.rank, v.kind) for v in found.victims] == [(0, "peer_failed"), (1, "peer_failed"), (4, "aborted")]


def test_a_record_at_time_zero_is_the_earliest_and_ties_go_to_the_lower_peer() -> None:
    assert cause(Stream(0, fail("peer_failed", 0.0, peer=5)), Stream(1, fail("peer_failed", 0.5, peer=2))).rank == 5
    assert cause(Stream(0, fail("peer_failed", 0.0, peer=5)), Stream(1, fail("peer_failed", 0.0, peer=2))).rank == 2


def test_a_peer_failed_that_names_no_rank_blames_nobody() -> None:
    found = cause(Stream(0, fail("peer_failed", 1.0)), Stream(1, fail("peer_failed", 2.0, peer=0)))
    assert (found.rank, found.kind) == (0, "peer")
    assert cause(Stream(0, fail("peer_failed", 1.0))).kind == "signal"


def test_the_named_peers_own_log_is_the_source_first_given_first() -> None:
    own = Stream(3, source="a/rank-00003.jsonl")
    found = cause(own, Stream(0, fail("peer_failed", 4.0, peer=3)), Stream(3, source="b/rank-00003.jsonl"))
    assert (found.rank, found.source) == (3, "a/rank-00003.jsonl")
    assert found.message == "named by rank 0's peer_failed record; its own log shows no failure"
    assert [v.rank for v in found.victims] == [0]


def test_when_every_failure_is_a_signal_the_signals_are_named_once_each() -> None:
    found = cause(
        Stream(0, fail("aborted", 1.0, signal="SIGTERM")),
        Stream(1, fail("aborted", 1.0, signal="SIGINT")),
        Stream(2, fail("aborted", 2.0, signal="SIGTERM")),
        Stream(3, fail("aborted", 2.0)),
    )
    assert (found.rank, found.kind, found.source, found.at) == (None, "signal", None, None)
    assert "every failed rank was stopped by SIGINT or SIGTERM or a signal (" in found.message
    assert [v.rank for v in found.victims] == [0, 1, 2, 3]
    assert found.finding().message.startswith("no rank failed on its own")
    assert found.finding().rank is None


def victim_summary(victims: list[Victim]) -> str:
    """The victims' part of a finding's message: all of it, for a cause with no rank and no message."""
    found = RootCause(
        run_id=None, rank=None, kind="signal", message="", source=None, line=None, at=None, victims=tuple(victims)
    )
    return found.finding().message


def test_the_victim_summary_groups_ranks_by_what_stopped_them() -> None:
    victims = [
        Victim(rank=r, kind=k, message="", signal=s)
        for r, k, s in [
            (0, "peer_failed", None),
            (1, "peer_failed", None),
            (2, "aborted", "SIGTERM"),
            (3, "aborted", None),
            (4, "failed", None),
            (5, "died", None),
            (6, "timeout", None),
            (7, "other", None),
        ]
    ]
    assert victim_summary(victims) == (
        "; victims: stopped by a peer's failure on ranks 0-1 (2 ranks); stopped by SIGTERM on ranks 2 (1 rank); "
        "stopped by a signal on ranks 3 (1 rank); failed later on ranks 4 (1 rank); died later on ranks 5 (1 rank); "
        "timed out on ranks 6 (1 rank); other on ranks 7 (1 rank)"
    )
    assert victim_summary([]) == ""


def test_the_finding_leads_with_the_time_after_the_first_record() -> None:
    found = cause(Stream(1, fail("failed", 102.5)), Stream(0, fail("aborted", 103.0, signal="SIGTERM")))
    assert (
        found.finding().message == "root cause (+2.500s after the first record): failed at 102.5; "
        "victims: stopped by SIGTERM on ranks 0 (1 rank)"
    )
    assert dataclasses.replace(found, at=None).finding().message.startswith("root cause: failed at 102.5")


def test_causes_and_victims_are_immutable_keyword_only_values() -> None:
    streams = (Stream(1, fail("failed", 102.5)), Stream(0, fail("aborted", 103.0, signal="SIGTERM")))
    found = cause(*streams)
    assert len({found, cause(*streams)}) == 1  # equal values, hashable: they can be collected and compared
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.victims[0].rank = 5  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.rank = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        Victim(0, "failed", "x")  # type: ignore[misc]
    with pytest.raises(TypeError):
        RootCause("run", 0, "failed", "x", None, None, None, ())  # type: ignore[misc]
