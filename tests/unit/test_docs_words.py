"""The project's text speaks of the project, not of how it is developed, and its tables stay tables.

Words: README.md, every page under docs/ (generated ones included), the config files at the root,
and the comments and string literals (docstrings, messages, help texts) of the shipped and run code
(`lifecycle/`, `states/`, `bindings/`, `scripts/`, `benchmarks/`, `examples/`, and the
other text files there: presets, shell scripts, `scripts/mutation.toml`). These are what a user
reads or runs. `tests/` is held to one of the phrases, an issue number (a test says what behaviour it
protects, not which issue asked for it), less this file, which quotes the words it refuses, and the
fixtures, which hold upstream sources verbatim.

The list names phrases, not single words: "session" alone is a terminal's or a browser's session,
"helper" a function, "first run" a user's first run of a run id; only the phrases that tell who ran
what, in which checkout, beside which other work, under which issue, and with which tool that is not
the project's dependency, fail.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = ("lifecycle", "states", "bindings", "scripts", "benchmarks", "examples")
ROOT_FILES = ("README.md", "pyproject.toml", "mkdocs.yml", ".ci/run")
TEXT_SUFFIXES = {".md", ".toml", ".yaml", ".yml", ".html", ".txt", ""}
# An issue of the project, also across a line break ("issue\n    20"); not one of another project's.
ISSUE = r"(?<!Megatron-LM )(?<!PyTorch )(?<!NCCL )\bissues?\s+#?\d+\b"

# Each phrase: what it gives away about the project's development.
PHRASES: dict[str, str] = {
    # who ran it, and beside what
    r"\b(?:this|that|another|other|these|those|parallel|each) sessions?\b": "a development session",
    r"\bsessions? beside\b": "a development session",
    r"\bbeside (?:other|another|the other|this repository's own)\b": "the other work on the machine",
    r"\b(?:another|the other|other) helpers?\b": "a helper of the development",
    r"\ba helper['’]s\b|\bhelper (?:worktree|sessions?|agents?|rows?)\b": "a helper of the development",
    r"\bthe lead['’]s\b|\b(?:of|for|by|to|ask|tell) the lead\b": "the lead of the development",
    r"\b(?:this|that|another|the other|my|our) (?:checkout|worktree)\b": "a development checkout",
    r"\bon this \d+-core machine\b": "the development machine (say which machine)",
    # provenance of a figure
    r"\b(?:first|second|third) runs?(?:'s)? (?:survivors?|figures?|had)\b": "which run gave a figure",
    r"\b(?:first|second|third) runs?\s*(?:[:;(|]|\d)": "which run gave a figure",
    r"\b(?:first|second|third) run,? (?:with|before|after|against|beside) the\b": "which run gave a figure",
    ISSUE: "the issue a change came from",
    # a commit: 7 to 12 hex digits with a letter and a digit among them (not "at 1048576 bytes")
    r"\b(?:since|at|on|before|after) `?(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,12}`?(?=[\s,.;:)])": (
        "the commit a figure came from"
    ),
    # tools that are not the project's
    r"\bfarm-(?:bench|studio)\b": "a tool that is not the project's",
    r"\bduplicates --change\b": "a tool that is not the project's",
    r"`issues(?: \w+)?`|\bissues (?:show|note|resolved|blocked|unsay)\b": "a tool that is not the project's",
    r"\bmounted tools?\b": "a tool that is not the project's",
}
PATTERN = re.compile("|".join(f"(?:{p})" for p in PHRASES), re.I)
NAMED = [(re.compile(p, re.I), why) for p, why in PHRASES.items()]
SKIP_DIRS = {"__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis", "node_modules"}


def _files() -> list[Path]:
    found = [ROOT / name for name in ROOT_FILES if (ROOT / name).is_file()]
    found += sorted((ROOT / "docs").rglob("*.md"))
    for package in CODE:
        for path in sorted((ROOT / package).rglob("*")):
            if path.is_file() and not SKIP_DIRS & set(path.parts) and path.suffix in TEXT_SUFFIXES | {".py"}:
                found.append(path)
    return found


def _python_text(source: str) -> list[tuple[int, str]]:
    """The comments and string literals of `source`, each with its first line."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    kept = (tokenize.COMMENT, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING))
    return [(t.start[0], t.string) for t in tokens if t.type in kept]


def _text(path: Path) -> list[tuple[int, str]]:
    source = path.read_text(errors="replace")
    if path.suffix == ".py":
        return _python_text(source)
    return list(enumerate(source.splitlines(), 1))


def development_words(paths: list[Path], root: Path = ROOT) -> list[str]:
    """`file:line: phrase (what it gives away)` for each phrase of `PHRASES` in `paths`' text."""
    found = []
    for path in paths:
        for first, text in _text(path):
            for match in PATTERN.finditer(text):
                line = first + text.count("\n", 0, match.start())
                why = next(w for p, w in NAMED if p.match(text, match.start()))
                found.append(f"{path.relative_to(root)}:{line}: {match.group()!r} ({why})")
    return found


def test_the_projects_text_does_not_speak_of_how_it_is_developed() -> None:
    found = development_words(_files())
    assert found == [], "words about the development, not the project:\n" + "\n".join(found)


def test_the_words_are_found_in_docs_and_in_code_comments_and_strings_not_in_names(tmp_path: Path) -> None:
    doc, code = tmp_path / "page.md", tmp_path / "mod.py"
    doc.write_text(
        "# Page\n\nMeasured in this session, beside other work (issue 35).\n\nAt 1048576 bytes, since `0bb019a`.\n"
    )
    code.write_text('session = 1  # second run: 3 s\nstart_new_session = True\nx = "see `issues show 5`"\n')
    found = development_words([doc, code], tmp_path)
    assert [f.split(": ", 1)[0] for f in found] == ["page.md:3"] * 3 + ["page.md:5", "mod.py:1", "mod.py:3"]


def issue_numbers(paths: list[Path], root: Path = ROOT) -> list[str]:
    """`file:line: issue N` for each issue of the project cited anywhere in `paths` (read as text:
    a name cannot hold one, so comments and strings need no tokenizer here)."""
    found = []
    for path in paths:
        source = path.read_text(errors="replace")
        for match in re.finditer(ISSUE, source, re.I):
            line = source.count("\n", 0, match.start()) + 1
            found.append(f"{path.relative_to(root)}:{line}: {' '.join(match.group().split())!r}")
    return found


def test_the_tests_say_what_they_protect_not_which_issue_asked_for_it() -> None:
    tests = [
        path
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if "fixtures" not in path.parts and path != Path(__file__).resolve()
    ]
    assert len(tests) > 200  # the scan reads the suite, not an empty folder
    found = issue_numbers(tests)
    assert found == [], "tests citing an issue (say what behaviour the test protects instead):\n" + "\n".join(found)


def test_an_issue_number_is_found_also_across_a_line_break_and_not_another_projects(tmp_path: Path) -> None:
    code = tmp_path / "test_x.py"
    code.write_text('"""Kept (issue\n    20); Megatron-LM issue 12; see #5255."""\nx = 1  # Issues #7 and 8\n')
    assert issue_numbers([code], tmp_path) == ["test_x.py:1: 'issue 20'", "test_x.py:3: 'Issues #7'"]


LONGEST_CELL = 400


def _cells(path: Path) -> list[tuple[int, str]]:
    """(line, cell) of every Markdown table row outside code fences."""
    cells, fenced = [], False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and line.lstrip().startswith("|"):
            cells += [(number, c.strip()) for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
    return cells


def test_no_table_cell_of_the_docs_is_longer_than_400_characters() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    long = [
        f"{page.relative_to(ROOT)}:{line}: {len(cell)} characters: {cell[:60]}…"
        for page in pages
        for line, cell in _cells(page)
        if len(cell) > LONGEST_CELL
    ]
    assert long == [], f"table cells over {LONGEST_CELL} characters (make them a list or a paragraph):\n" + "\n".join(
        long
    )


GENERATED = re.compile(r"<!-- generated from [^>]*-->.*?<!-- end generated -->", re.S)
GENERATED_PAGES = ("state-diagram.md",)  # written whole by `lifecycle graph --format markdown`
DOCS_BUDGET = 150_000


def test_the_user_docs_are_at_most_150_kb_without_their_generated_parts() -> None:
    """docs/*.md, less the generated events, mutation and benchmark tables and the state diagram:
    what a person reads through."""
    sizes = {
        page.name: len(GENERATED.sub("", page.read_text()).encode())
        for page in sorted((ROOT / "docs").glob("*.md"))
        if page.name not in GENERATED_PAGES
    }
    assert sum(sizes.values()) <= DOCS_BUDGET, sorted(sizes.items(), key=lambda kv: -kv[1])
    assert "log-format.md" in sizes and sizes["log-format.md"] < 20_000  # its generated table was taken out
