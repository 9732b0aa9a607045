"""The table of docs/benchmarks.md, generated from benchmarks/results.toml.

    python benchmarks/results_table.py            print the table
    python benchmarks/results_table.py --write    write it into docs/benchmarks.md (between its markers)
    python benchmarks/results_table.py --check    exit 1 when docs/benchmarks.md's table is not the generated one

benchmarks/results.toml holds one `[[benchmark]]` per benchmark the page shows: the script, the command
that gave its figures, what it measures, its target, `shows` (the result cell: a format string over
`figures`), the figures, and where they were measured (machine, environment, load, date, commit, a note).
A benchmark run with `--record` rewrites its own entry (benchmarks/_results.py), then the table.
"""

from __future__ import annotations

import string
import sys
from pathlib import Path
from typing import Any

import tomllib

from lifecycle.log.schema import replace_generated

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results.toml"
DOC = ROOT / "docs" / "benchmarks.md"
START = "<!-- generated from benchmarks/results.toml: python benchmarks/results_table.py --write -->"
HEAD = """\
# The last recorded figures of each benchmark that docs/benchmarks.md shows, and where they were measured.
# A benchmark run with --record rewrites its own entry (figures, command, machine, environment, load, date,
# commit) and keeps what it measures, its target and `shows`; docs/benchmarks.md's table is generated from
# this file (python benchmarks/results_table.py --write). shows: the result cell, a format string over
# figures. load: the 1-minute load average as the run ended; commit: `-dirty` when the checkout differed.
"""
Entry = dict[str, Any]


def load(path: Path = RESULTS) -> list[Entry]:
    entries: list[Entry] = tomllib.loads(path.read_text())["benchmark"]
    return entries


def _value(value: object) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{key} = {_value(v)}" for key, v in value.items()) + " }"
    return repr(value)


def dump(entries: list[Entry]) -> str:
    """The entries as TOML, one `[[benchmark]]` table each, keys in the order given."""
    out = [HEAD]
    for entry in entries:
        out.append("[[benchmark]]")
        out += [f"{key} = {_value(value)}" for key, value in entry.items()]
        out.append("")
    return "\n".join(out)


def missing(entry: Entry) -> list[str]:
    """The figures `entry["shows"]` names that `entry["figures"]` lacks."""
    named = {field.split(".")[0].split("[")[0] for _, field, _, _ in string.Formatter().parse(entry["shows"]) if field}
    return sorted(named - set(entry["figures"]))


def result(entry: Entry) -> str:
    gone = missing(entry)
    if gone:
        raise ValueError(f"benchmarks/results.toml: {entry['name']}: shows names figures it lacks: {gone}")
    return str(entry["shows"]).format(**entry["figures"])


def table(entries: list[Entry]) -> str:
    rows = ["| benchmark (command) | what it measures | target | result |", "|---|---|---|---|"]
    rows += [f"| `{e['command']}` | {e['measures']} | {e['target']} | {result(e)} |" for e in entries]
    return "\n".join(rows)


def with_table(doc: str, generated: str) -> str:
    """`doc` with the text between its markers replaced by `generated`."""
    return replace_generated(doc, START, generated, "docs/benchmarks.md")


def write(results: Path = RESULTS, doc: Path = DOC) -> None:
    doc.write_text(with_table(doc.read_text(), table(load(results))))


def main(argv: list[str]) -> int:
    if "--write" in argv:
        write()
    elif "--check" in argv:
        if with_table(DOC.read_text(), table(load())) != DOC.read_text():
            print("docs/benchmarks.md's table is not benchmarks/results.toml's: run")
            print("python benchmarks/results_table.py --write")
            return 1
    else:
        print(table(load()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
