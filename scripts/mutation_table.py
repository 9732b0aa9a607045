"""The mutation table of docs/testing.md, generated from scripts/mutation-results.toml.

    python scripts/mutation_table.py            print the table
    python scripts/mutation_table.py --write    write it into docs/testing.md (between its markers)
    python scripts/mutation_table.py --check    exit 1 when docs/testing.md's table is not the generated one

scripts/mutation-results.toml holds the last result of each module of scripts/mutation.toml (`[[module]]`:
mutants run, killed, equivalent, survived, the mutants not run, a note on what is left) and the outcome of
each hand-written mistake (`[[mistake]]`). `scripts/mutation --record MODULE...` writes the modules it ran
there (`record`), then the table.
"""

from __future__ import annotations

import sys
from pathlib import Path

import tomllib

from lifecycle.log.schema import replace_generated

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "scripts" / "mutation-results.toml"
CONFIG = ROOT / "scripts" / "mutation.toml"
DOC = ROOT / "docs" / "testing.md"
START = "<!-- generated from scripts/mutation-results.toml: python scripts/mutation_table.py --write -->"
FIELDS = ("mutants", "killed", "equivalent", "survived", "not_run")
HEAD = """\
# The last result of each module of scripts/mutation.toml, and of each hand-written mistake.
# Written by `scripts/mutation --record MODULE...`; docs/testing.md's table is generated from this file
# (python scripts/mutation_table.py --write). mutants: those run, = killed + equivalent + survived;
# not_run: the module's mutants left unrun (a partial run); note: what is left, and why.
"""


def load(path: Path = RESULTS) -> dict[str, list[dict]]:
    data = tomllib.loads(path.read_text())
    return {"module": data.get("module", []), "mistake": data.get("mistake", [])}


def _value(value: object) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


def dump(results: dict[str, list[dict]]) -> str:
    """The results as TOML, one table per module and per mistake, in the order given."""
    out = [HEAD]
    for kind in ("module", "mistake"):
        for entry in results[kind]:
            out.append(f"[[{kind}]]")
            out += [f"{key} = {_value(value)}" for key, value in entry.items()]
            out.append("")
    return "\n".join(out)


def score(entry: dict) -> str:
    counted = entry["mutants"] - entry["equivalent"]
    return f"{100.0 * entry['killed'] / counted if counted else 100.0:.1f} %"


def table(results: dict[str, list[dict]], modules: list[str]) -> str:
    """One row per module of scripts/mutation.toml, in its order; a module with no result reads "not run"."""
    known = {entry["name"]: entry for entry in results["module"]}
    rows = [
        "| module | mutants | killed | equivalent | survived | score | note |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name in modules:
        entry = known.get(name)
        if entry is None:
            rows.append(f"| {name} | | | | | not run | |")
            continue
        note = entry.get("note", "")
        if entry.get("not_run"):
            note = f"partial: {entry['not_run']} not run" + (f"; {note}" if note else "")
        counts = " | ".join(str(entry[key]) for key in FIELDS[:4])
        rows.append(f"| {name} | {counts} | {score(entry)} | {note} |")
    rows += ["", "| hand-written mistake | module | outcome |", "| --- | --- | --- |"]
    rows += [f"| {m['what']} | {m['name']} | {m.get('outcome', 'not run')} |" for m in results["mistake"]]
    return "\n".join(rows)


def modules_of(config: Path = CONFIG) -> list[str]:
    return [m["name"] for m in tomllib.loads(config.read_text())["module"]]


def with_table(doc: str, generated: str) -> str:
    """`doc` with the text between its markers replaced by `generated`."""
    return replace_generated(doc, START, generated, "docs/testing.md")


def _replaced(old: list[dict], new: list[dict], key: str) -> list[dict]:
    fresh = {entry[key]: entry for entry in new}
    return [fresh.pop(entry[key], entry) for entry in old] + list(fresh.values())


def record(modules: list[dict], mistakes: list[dict], path: Path = RESULTS) -> None:
    """Replace the results of these modules (by name) and mistakes (by `what`), keep the others."""
    results = load(path)
    path.write_text(
        dump(
            {
                "module": _replaced(results["module"], modules, "name"),
                "mistake": _replaced(results["mistake"], mistakes, "what"),
            }
        )
    )


def main(argv: list[str]) -> int:
    generated = table(load(), modules_of())
    if "--write" in argv:
        DOC.write_text(with_table(DOC.read_text(), generated))
    elif "--check" in argv:
        if with_table(DOC.read_text(), generated) != DOC.read_text():
            print("docs/testing.md's mutation table is not scripts/mutation-results.toml's: run")
            print("python scripts/mutation_table.py --write")
            return 1
    else:
        print(generated)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
