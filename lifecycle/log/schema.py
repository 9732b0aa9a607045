"""The startup log's records, typed: one `msgspec.Struct` per event of `events.ALL` (`SCHEMA`).

The one definition of the log format that the writers, the audit's readers and docs/log-format.md
are checked against:

- Each event's struct subclasses `Record`, the envelope every record carries (`ENVELOPE`: its
  fields and their meanings; the writer, `_writer.AuditLog`, adds them). `event` is the tag that
  picks the struct, so `msgspec.convert(record, SCHEMA[record["event"]])` checks a whole record.
- Each field's type is what the writers put there, and its meaning is its
  `Annotated[T, msgspec.Meta(description=...)]`; the struct's docstring says when it is written.
- A field that is only sometimes present has the default `msgspec.UNSET` (its type includes
  `UnsetType`): absent and null differ in this log (`failed_event: null` says the file failed while
  opening; an absent `attempt` says the file was new), so `None` cannot mean absent. A field
  without a default is in every record of its event (it may still be null where its type says so).
- `read_type(event, name)`: the type a reader gets a field as: its type here, or None where a
  record lacks it; `read_fields(event, names)`: those fields as a reader's struct declares them. The
  audit (`lifecycle/audit/_reads.py`), the export (`lifecycle/export/_reads.py`) and
  `lifecycle.testing.check_log` read the records through these types, and say why one is not of its
  type with `not_of_type`.
- `fields_of(event)`: the fields the event's struct declares itself (not the envelope; an event
  may declare an envelope name again, as `cycle_started` does `world_size`).
- Writers construct these types (`lifecycle.log.records` re-exports them) and `AuditLog.write` them;
  the writer fills the envelope. A log written by name (`AuditLog.emit`: tests, tools) is checked
  with `LIFECYCLE_STRICT_RECORDS=1` (the test suite sets it): it refuses any field but the event's and
  the envelope's (`record_fields(event)`).

docs/log-format.md's table of events is generated from here: `python -m lifecycle.log.schema
--markdown` prints it, `--write docs/log-format.md` replaces it (a unit test compares them).
Imports neither torch nor megatron.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

from lifecycle.log._schema import SCHEMA, fields_described
from lifecycle.log._schema import not_of_type as not_of_type
from lifecycle.log._schema import read_fields as read_fields
from lifecycle.log._schema import read_type as read_type
from lifecycle.log._schema_base import Field

GENERATED_BEGIN: Final = "<!-- generated from lifecycle/log/schema.py: python -m lifecycle.log.schema --markdown -->"
GENERATED_END: Final = "<!-- end generated -->"


def _row(field: Field) -> str:
    kind = field.type.replace("|", "\\|") + (", optional" if field.optional else "")
    return f"| `{field.name}` | {kind} | {field.meaning} |"


def markdown() -> str:
    """docs/log-format.md's events: a heading per event, when it is written (the struct's
    docstring), then a table of its fields, one row per field with its type and meaning (so that no
    table cell holds more than one field's meaning)."""
    parts = []
    for event, cls in SCHEMA.items():
        when = " ".join((cls.__doc__ or "").split())
        fields = [_row(f) for f in fields_described(event)]
        table = "\n".join(["| field | type | meaning |", "|---|---|---|", *fields]) if fields else "No fields."
        parts.append(f"### `{event}`\n\n{when}\n\n{table}\n")
    return "\n".join(parts)


def replace_generated(text: str, begin: str, generated: str, page: str) -> str:
    """`text` with its section from the line `begin` to `GENERATED_END` replaced by `generated`.

    The one writer of the docs' generated sections: this module's events (`markdown()`) in
    docs/log-format.md, and the tables of docs/testing.md and docs/benchmarks.md, each of which has
    its own `begin` line. `page` names the page when a marker is missing.
    """
    before, found, rest = text.partition(begin)
    _, ended, after = rest.partition(GENERATED_END)
    if not found or not ended:
        raise ValueError(f"{page} lacks its markers: put back {begin!r} ... {GENERATED_END!r} around its table")
    body = generated if generated.endswith("\n") else generated + "\n"
    return f"{before}{begin}\n{body}{GENERATED_END}{after}"


def main(argv: list[str]) -> int:
    """`--markdown`: print the table; `--write PATH`: replace the generated section of PATH."""
    if argv == ["--markdown"]:
        sys.stdout.write(markdown())
        return 0
    if len(argv) == 2 and argv[0] == "--write":
        path = Path(argv[1])
        path.write_text(replace_generated(path.read_text(), GENERATED_BEGIN, markdown(), str(path)))
        return 0
    sys.stderr.write("usage: python -m lifecycle.log.schema --markdown | --write docs/log-format.md\n")
    return 2


__all__ = [
    "SCHEMA",
    "markdown",
]

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
