"""Writers construct the record types (`lifecycle.log.records`): a typed record is
written with the bytes its fields by name made, and no module of the packages writes by name."""

from __future__ import annotations

import ast
from pathlib import Path

from lifecycle.log import AuditLog, events, records

ROOT = Path(__file__).resolve().parents[2]
WRITERS = ("emit", "record")


def _pair() -> tuple[AuditLog, AuditLog]:
    def log() -> AuditLog:
        return AuditLog(run_id="r", rank=3, world_size=8, keep_records=True, clock=lambda: 1.25)

    return log(), log()


def test_a_typed_record_is_written_as_the_same_record_by_name_with_its_unset_fields_absent() -> None:
    typed, by_name = _pair()
    typed.write(
        records.TransitionCompleted(
            trigger="validate", source="CONFIGURED", dest="VALIDATED", duration_s=0.5, config_fingerprint=None
        )
    )
    by_name.emit(
        events.TRANSITION_COMPLETED,
        trigger="validate",
        source="CONFIGURED",
        dest="VALIDATED",
        duration_s=0.5,
        config_fingerprint=None,
    )
    typed.write(records.StepCompleted(step=1, loss=None, duration_s=0.01))
    by_name.emit(events.STEP_COMPLETED, step=1, loss=None, duration_s=0.01)
    assert typed.records == by_name.records
    assert "reason" not in typed.records[0] and typed.records[0]["config_fingerprint"] is None
    assert typed.records[1]["hash"] == by_name.records[1]["hash"]


def test_a_typed_record_has_the_logs_envelope_whatever_envelope_values_it_was_given() -> None:
    log, _ = _pair()
    log.write(records.StepCompleted(step=1, loss=0.5, duration_s=0.01, rank=0, seq=9, run_id="other", hash="x" * 64))
    written = log.records[-1]
    assert (written["rank"], written["seq"], written["run_id"], written["world_size"]) == (3, 0, "r", 8)
    assert written["hash"] != "x" * 64


def test_an_envelope_name_an_event_declares_again_is_written_from_the_record() -> None:
    log, _ = _pair()
    log.write(records.CycleStarted(ledger=[], fingerprint=None, world_size=6))
    assert log.records[-1]["world_size"] == 6


def test_a_typed_records_credentials_are_redacted_as_by_name() -> None:
    typed, by_name = _pair()
    error = "connect to https://user:secret@host/x failed"
    typed.write(
        records.TransitionFailed(trigger="validate", source="CONFIGURED", error_type="E", error=error, duration_s=0.0)
    )
    by_name.emit(
        events.TRANSITION_FAILED, trigger="validate", source="CONFIGURED", error_type="E", error=error, duration_s=0.0
    )
    assert typed.records == by_name.records and "secret" not in str(typed.records)


def _by_name(path: Path, root: Path = ROOT) -> list[str]:
    """`file:line` of each `.emit(...)` / `.record(...)` whose first argument is an event name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
            continue
        first = node.args[0]
        named = isinstance(first, ast.Constant) and first.value in events.ALL
        named = named or (
            isinstance(first, ast.Attribute) and isinstance(first.value, ast.Name) and first.value.id == "events"
        )
        if node.func.attr in WRITERS and named:
            found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_module_of_the_packages_writes_a_record_by_its_event_name() -> None:
    paths = [p for package in ("lifecycle", "bindings", "states") for p in sorted((ROOT / package).rglob("*.py"))]
    found = [where for path in paths for where in _by_name(path)]
    assert found == [], f"build the event's type from lifecycle.log.records instead: {found}"


def test_the_scan_names_each_write_by_event_name_by_file_and_line(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    lines = [
        "ctx.emit(events.MODEL_BUILT, chunks=1)",
        'lc.record("step_completed", step=1)',
        "lc.record(StepCompleted(step=1))",
    ]
    probe.write_text("\n".join(lines))
    assert _by_name(probe, tmp_path) == ["probe.py:1", "probe.py:2"]
