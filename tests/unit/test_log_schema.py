"""The typed record schema (lifecycle/log/schema.py): the one definition of the startup log's
records that the writers, the audit's readers and docs/log-format.md are held to."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import get_type_hints

import msgspec
import pytest

from lifecycle import InProcessPhases, Lifecycle, RunConfig
from lifecycle.log import AuditLog, events, records
from lifecycle.log.schema import SCHEMA, markdown, read_type, replace_generated
from lifecycle.log.schema import main as schema_main
from lifecycle.testing import (
    AUDIT_READ_TYPES,
    ENVELOPE,
    EXPORT_READERS,
    GENERATED_BEGIN,
    GENERATED_END,
    READS,
    fields_of,
    read_log,
)
from lifecycle.testing import fields_described as described
from states import State

DOC = Path(__file__).resolve().parents[2] / "docs" / "log-format.md"
STRICT = "LIFECYCLE_STRICT_RECORDS"


def test_the_schema_has_a_type_for_every_event_and_no_other() -> None:
    assert SCHEMA.keys() == events.ALL
    assert all(SCHEMA[event].__struct_config__.tag == event for event in SCHEMA)


def test_the_log_format_doc_lists_the_events_as_the_schema_generates_them() -> None:
    text = DOC.read_text()
    assert GENERATED_BEGIN in text and GENERATED_END in text, f"docs/log-format.md lost {GENERATED_BEGIN!r}"
    assert replace_generated(text, GENERATED_BEGIN, markdown(), "docs/log-format.md") == text, (
        "docs/log-format.md's table of events is out of date: regenerate it with "
        "`python -m lifecycle.log.schema --write docs/log-format.md` (or paste `--markdown`'s output)"
    )


def test_write_replaces_a_stale_table_of_events_and_keeps_the_rest_of_the_page(tmp_path: Path) -> None:
    text = DOC.read_text()
    stale = tmp_path / "log-format.md"
    stale.write_text(text.replace("### `", "### `old_", 3))
    assert schema_main(["--write", str(stale)]) == 0
    assert stale.read_text() == text
    stale.write_text("# Log format\n")
    with pytest.raises(ValueError, match=r"log-format\.md lacks its markers"):
        schema_main(["--write", str(stale)])


def test_every_field_the_audit_reads_is_in_its_events_schema_or_the_envelope() -> None:
    missing = [
        f"{event}.{field}"
        for event, fields in READS.items()
        for field in fields
        if field not in fields_of(event) and field not in ENVELOPE
    ]
    assert missing == [], f"the audit reads fields lifecycle/log/schema.py does not declare: {missing}"


def test_every_field_the_audit_reads_is_typed_as_its_events_schema_types_it() -> None:
    """Each handler reads its event's struct (`AUDIT_READ_TYPES`): each field of its schema type, or
    None where absent (`read_type`), as the batch path decodes it."""
    wrong = [
        f"{cls.__name__}: {event}.{f.name}: {f.type}"
        for event, cls in AUDIT_READ_TYPES.items()
        for f in msgspec.structs.fields(cls)
        if f.required or f.type != read_type(event, f.name)
    ]
    assert wrong == [], f"the audit reads fields as other types than lifecycle/log/schema.py says: {wrong}"


def test_every_field_the_export_reads_is_typed_as_its_events_schema_types_it() -> None:
    """The details (`export`, `report`, the live spans) and `export --follow` read each record as a
    struct of the fields they use: each of its schema type, or None where absent (`read_type`); the
    details' `rank` and `ts` of the envelope's type, required; `event` a str."""
    required = get_type_hints(records.Record) | {"event": str}
    wrong = [
        f"{cls.__name__}: {event}.{f.name}: {f.type}"
        for event, cls in EXPORT_READERS
        for f in msgspec.structs.fields(cls)
        if f.type != (required[f.name] if f.required else read_type(event, f.name))
    ]
    assert wrong == [], f"the export reads fields as other types than lifecycle/log/schema.py says: {wrong}"


def test_every_field_of_the_schema_and_the_envelope_says_what_it_means() -> None:
    undescribed = [f"{event}.{f.name}" for event in SCHEMA for f in described(event) if not f.meaning.strip()]
    undescribed += [name for name, meaning in ENVELOPE.items() if not meaning.strip()]
    assert undescribed == []
    assert [event for event, cls in SCHEMA.items() if not (cls.__doc__ or "").strip()] == []


def test_a_field_only_sometimes_present_defaults_to_unset_and_no_other_has_a_default() -> None:
    for event, cls in SCHEMA.items():
        optional = {f.name for f in described(event) if f.optional}
        defaults = {f.name: f.default for f in msgspec.structs.fields(cls) if f.name in fields_of(event)}
        assert {name for name, default in defaults.items() if default is msgspec.UNSET} == optional, event
        assert {name for name, default in defaults.items() if default is not msgspec.NODEFAULT} == optional, event


def test_a_record_with_a_field_its_events_type_lacks_cannot_be_built(make_lc: Callable[..., Lifecycle]) -> None:
    lc = make_lc()
    with pytest.raises(TypeError, match="'bogus'"):
        lc.record(records.StepCompleted(step=1, loss=None, duration_s=0.1, bogus=1))
    lc.record(records.StepCompleted(step=1, loss=0.5, duration_s=0.1))
    assert lc.records[-1]["event"] == events.STEP_COMPLETED and "bogus" not in str(lc.records)


def test_strict_mode_refuses_a_field_the_events_schema_lacks_in_a_log_written_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(STRICT, "1")
    log = AuditLog(run_id="r", rank=0, world_size=1, keep_records=True)
    with pytest.raises(ValueError, match=r"step_completed.*'bogus'.*add it to lifecycle/log/schema\.py"):
        log.emit(events.STEP_COMPLETED, step=1, loss=None, duration_s=0.1, bogus=1)
    assert log.records == []


def test_without_strict_mode_a_log_takes_any_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STRICT, raising=False)
    log = AuditLog(run_id="r", rank=0, world_size=1, keep_records=True)
    log.emit(events.STEP_COMPLETED, step=1, loss=None, duration_s=0.1, users_own=2)
    assert log.records[-1]["users_own"] == 2


def test_the_records_of_a_whole_startup_and_shutdown_have_their_events_types(tmp_path: Path) -> None:
    with Lifecycle(RunConfig(), log_dir=tmp_path, phases=InProcessPhases()) as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        lc.record(records.StepCompleted(step=1, loss=2.5, duration_s=0.01))
    for record in read_log(tmp_path / "rank-00000.jsonl"):
        typed = msgspec.convert(record, SCHEMA[str(record["event"])])
        assert msgspec.to_builtins(typed) == record
