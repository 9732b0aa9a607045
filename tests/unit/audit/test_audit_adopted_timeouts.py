"""The drop-in adopted the script's process group (`process_group_adopted`): its timeout, read back
from the group, is the world's in the rank's timeout map, marked as the script's (`lifecycle audit`,
`lifecycle report`); the map is the same on every rank that read the same."""

from __future__ import annotations

from pathlib import Path

from audit_logs import clean_events, index, write_events

from lifecycle.audit import audit, timeout_maps


def adopted(timeout_s: float | None) -> tuple[str, dict[str, object]]:
    return "process_group_adopted", {"backend": "gloo", "world_size": 2, "rank": 0, "timeout_s": timeout_s}


def with_adopted(timeout_s: float | None) -> list[tuple[str, dict[str, object]]]:
    events = clean_events()
    at = index(events, "distributed_initialized")
    return [*events[:at], adopted(timeout_s), *events[at:]]


def test_the_scripts_group_timeout_is_the_worlds_in_the_map_marked_as_the_scripts(tmp_path: Path) -> None:
    for rank in (0, 1):
        write_events(tmp_path, with_adopted(1800.0), rank=rank, world=2, run_id="r")
    [summary] = timeout_maps(audit([str(tmp_path)], jobs=1).ranks)
    assert (summary.rank, summary.same, summary.other) == (0, 2, ())
    assert summary.line.startswith("startup.timeout_s=unread; world (the script's, adopted) 1800 s, store unread")


def test_a_group_whose_timeout_could_not_be_read_says_so(tmp_path: Path) -> None:
    write_events(tmp_path, with_adopted(None), rank=0, world=1, run_id="r")
    [summary] = timeout_maps(audit([str(tmp_path)], jobs=1).ranks)
    assert "world (the script's, adopted) unread" in summary.line


def test_a_log_without_an_adopted_group_has_no_map_from_it(tmp_path: Path) -> None:
    write_events(tmp_path, clean_events(), rank=0, world=1, run_id="r")
    assert all("adopted" not in t.line for t in timeout_maps(audit([str(tmp_path)], jobs=1).ranks))
