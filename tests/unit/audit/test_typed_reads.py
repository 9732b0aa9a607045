"""The readers read each field as the log's schema types it: a record whose field has
another type is refused by name, by the audit on both of its paths and by `check_log`."""

from __future__ import annotations

from pathlib import Path

import orjson
from audit_logs import clean_events, write_events

from lifecycle.audit import audit
from lifecycle.errors import LogUnreadable
from lifecycle.testing import RankAudit, check_log, read_log

WRONG = "startup_aborted: field 'signal' is 15, expected str"


def _aborted_by_a_number(log_dir: Path) -> Path:
    """A startup aborted by a `signal` written as a number: the schema says a str (`SIGTERM`)."""
    ev = clean_events()
    return write_events(log_dir, [*ev[:3], ("startup_aborted", dict(signal=15, state="VALIDATED"))])


def test_a_field_of_another_type_than_the_schemas_is_unreadable_naming_the_event_and_the_field(tmp_path: Path) -> None:
    path = _aborted_by_a_number(tmp_path)
    result = audit([str(tmp_path)], jobs=1)
    assert result.exit_code == 2
    assert [str(e) for e in result.errors] == [f"{path}:4: {WRONG}"]


def test_a_record_read_on_its_own_is_held_to_the_same_types(tmp_path: Path) -> None:
    """The record-by-record path (a damaged chain, interleaved ranks) converts a parsed record to the
    types the batch reader decodes, before a handler reads it."""
    path = _aborted_by_a_number(tmp_path)
    rank = RankAudit(str(path))
    lines = path.read_bytes().splitlines()
    try:
        for lineno, line in enumerate(lines, 1):
            rank.feed(orjson.loads(line), line, lineno)
    except LogUnreadable as exc:
        assert str(exc) == f"{path}:4: {WRONG}"
    else:
        raise AssertionError("a signal written as a number was read")


def test_check_log_names_a_record_whose_field_is_not_of_its_schema_type(tmp_path: Path) -> None:
    records = read_log(_aborted_by_a_number(tmp_path))
    assert check_log(records) == [f"record 3: {WRONG}"]
    assert check_log(read_log(write_events(tmp_path / "clean", clean_events()))) == []
