"""scripts/mutation's body: cosmic-ray over the modules of scripts/mutation.toml, one worker, in a copy.

Each module is one cosmic-ray session whose test command runs only that module's tests. The score of a
module is killed / (mutants - equivalent): a mutant listed under [[equivalent]] in the toml (by path,
operator and the text of the mutated line) cannot change behaviour and is left out, with its reason.
The hand-written mistakes (`[[mistake]]`, scripts/_mistakes.py) run after the chosen modules' mutants.
`--record` writes the last results to scripts/mutation-results.toml and docs/testing.md's table.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import _mistakes  # scripts/, the first entry of sys.path when scripts/_mutation.py runs
import mutation_table
import tomllib

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / ".mutation"
WORK = STATE / "work"
VENV = ROOT / ".venv" / "bin"


@dataclass
class Score:
    name: str
    total: int = 0
    killed: int = 0
    pending: int = 0
    stale: bool = False
    survivors: list[str] = field(default_factory=list)
    equivalent: list[str] = field(default_factory=list)

    @property
    def counted(self) -> int:
        return self.total - len(self.equivalent)

    @property
    def percent(self) -> float:
        return 100.0 * self.killed / self.counted if self.counted else 100.0


def sync_copy() -> None:
    """Lay the working tree (tracked and untracked, not ignored) into .mutation/work, anew."""
    files = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True, capture_output=True
        )
        .stdout.decode()
        .split("\0")
    )
    if WORK.exists():
        shutil.rmtree(WORK)
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            dest = WORK / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)


def test_command(module: dict) -> str:
    """pytest of the module's tests, on the interpreter its entry names (`python`, relative to the
    repository: `.venv-floor/bin/python` for code whose tests need the floor's packages), else .venv's."""
    python = ROOT / module["python"] if "python" in module else VENV / "python"
    tests = module["tests"]
    # PYTHONPATH makes the copy win over the editable install, in the test process and its children.
    return f"env PYTHONPATH={WORK} {python} -m pytest -x -q -p no:cacheprovider --no-header -W ignore {' '.join(tests)}"


def fingerprint(module: dict, run: dict, base: Path = WORK) -> str:
    """What a module's results depend on: its config, sources and tests (in the copy the mutants run in)."""
    digest = hashlib.sha256(repr((module, run)).encode())
    for name in [*module["paths"], *module["tests"], "tests/conftest.py", "tests/unit/conftest.py"]:
        path = base / name
        digest.update(path.read_bytes() if path.exists() else b"-")
    return digest.hexdigest()


def write_config(module: dict, run: dict) -> Path:
    paths = ", ".join(f'"{p}"' for p in module["paths"])
    config = STATE / f"{module['name']}.toml"
    config.write_text(
        "[cosmic-ray]\n"
        f"module-path = [{paths}]\n"
        f"timeout = {float(run['timeout'])}\n"
        "excluded-modules = []\n"
        f'test-command = "{test_command(module)}"\n\n'
        '[cosmic-ray.distributor]\nname = "local"\n'
    )
    return config


def baseline(module: dict) -> None:
    """The unmutated tests must pass (else every mutant would look killed); this also warms __pycache__."""
    done = subprocess.run(test_command(module).split(), cwd=WORK, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{module['name']}: the tests fail without any mutant; fix them first:\n{done.stdout[-3000:]}")


def run_module(module: dict, run: dict, fresh: bool) -> None:
    session = STATE / f"{module['name']}.sqlite"
    stamp = STATE / f"{module['name']}.fingerprint"
    current = fingerprint(module, run)
    if fresh or not stamp.exists() or stamp.read_text() != current:
        session.unlink(missing_ok=True)
    config = write_config(module, run)
    baseline(module)
    if not session.exists():
        subprocess.run([VENV / "cosmic-ray", "init", config, session], cwd=WORK, check=True)
        skip_filtered(session, run, module.get("functions", {}))
        stamp.write_text(current)
    print(f"{module['name']}: running the pending mutants of {', '.join(module['paths'])}", flush=True)
    started = time.monotonic()
    subprocess.run([VENV / "cosmic-ray", "exec", config, session], cwd=WORK, check=True)
    print(f"{module['name']}: done in {time.monotonic() - started:.0f} s", flush=True)


def function_lines(path: str, names: list[str]) -> set[int]:
    """Lines of the functions named `name` or `Class.name` in `path` (found anew, so edits move them)."""
    lines: set[int] = set()
    tree = ast.parse((WORK / path).read_text())
    scopes: list[tuple[str, ast.AST]] = [("", tree)]
    while scopes:
        prefix, node = scopes.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                scopes.append((f"{prefix}{child.name}.", child))
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and f"{prefix}{child.name}" in names:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def skip_filtered(session: Path, run: dict, functions: dict[str, list[str]]) -> None:
    """Mark as skipped, in one write, the mutants of excluded operators and those outside the chosen
    functions of the files that name some (cosmic-ray's own filter writes them one by one)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    excluded = re.compile("|".join(f"(?:{e})" for e in run["exclude-operators"]))
    chosen = {path: function_lines(path, names) for path, names in functions.items()}
    with use_db(str(session), WorkDB.Mode.open) as db:
        skipped = []
        for item in db.pending_work_items:
            spec = item.mutations[0]
            lines = chosen.get(str(spec.module_path))
            if excluded.match(spec.operator_name) or (lines is not None and spec.start_pos[0] not in lines):
                skipped.append(item.job_id)
        db.set_multiple_results(skipped, WorkResult(output="filtered", worker_outcome=WorkerOutcome.SKIPPED))


def source_line(path: str, line: int) -> str:
    lines = (ROOT / path).read_text().splitlines()
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def score(module: dict, run: dict, equivalents: list[dict]) -> Score:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome

    result = Score(module["name"])
    session = STATE / f"{module['name']}.sqlite"
    if not session.exists():
        return result
    stamp = STATE / f"{module['name']}.fingerprint"
    result.stale = not stamp.exists() or stamp.read_text() != fingerprint(module, run, ROOT)
    with use_db(str(session), WorkDB.Mode.open) as db:
        done = {item.job_id: (item, res) for item, res in db.completed_work_items}
        result.pending = db.num_work_items - len(done)
    for item, res in done.values():
        if res.worker_outcome == WorkerOutcome.SKIPPED:
            continue
        result.total += 1
        spec = item.mutations[0]
        path, (line, col) = str(spec.module_path), spec.start_pos
        text = source_line(path, line)
        operator = spec.operator_name.removeprefix("core/")
        where = f"{path}:{line}:{col} {operator}: {text}"
        if res.is_killed:
            result.killed += 1
            continue
        reason = next(
            (
                e["reason"]
                for e in equivalents
                if e["path"] == path
                and e["operator"] == operator
                and e["code"] == text
                and e.get("col", col) == col
                and e.get("line", line) == line
            ),
            None,
        )
        if reason is None:
            result.survivors.append(where)
        else:
            result.equivalent.append(f"{where}\n      equivalent: {reason}")
    return result


def report(scores: list[Score]) -> str:
    rows = [f"{'module':<22} {'mutants':>7} {'killed':>6} {'equiv':>5} {'survived':>8} {'score':>7}"]
    for s in scores:
        note = f"  ({s.pending} not run yet)" if s.pending else ""
        note += "  (stale: sources or tests changed since; run it again)" if s.stale else ""
        rows.append(
            f"{s.name:<22} {s.total:>7} {s.killed:>6} {len(s.equivalent):>5} "
            f"{len(s.survivors):>8} {s.percent:>6.1f}%{note}"
        )
    killed, counted = sum(s.killed for s in scores), sum(s.counted for s in scores)
    rows.append(
        f"{'all':<22} {sum(s.total for s in scores):>7} {killed:>6} "
        f"{sum(len(s.equivalent) for s in scores):>5} {sum(len(s.survivors) for s in scores):>8} "
        f"{100.0 * killed / counted if counted else 100.0:>6.1f}%"
    )
    for s in scores:
        for line in s.survivors:
            rows.append(f"SURVIVED   {line}")
        for line in s.equivalent:
            rows.append(f"EQUIVALENT {line}")
    return "\n".join(rows)


def record(scores: list[Score], mistakes: list[dict]) -> None:
    """Write the chosen modules' results (those run in full on the current files) and the mistakes'
    outcomes into scripts/mutation-results.toml, then its table into docs/testing.md. A note on what
    a module leaves alive is written there by hand."""
    whole = [s for s in scores if not s.stale and not s.pending and s.total]
    for s in scores:
        if s not in whole:
            print(f"{s.name}: not recorded (stale, partial or never run): run it again first")
    outcomes = _mistakes.load(STATE)
    mutation_table.record(
        [
            {"name": s.name, "mutants": s.total, "killed": s.killed}
            | {"equivalent": len(s.equivalent), "survived": len(s.survivors)}
            for s in whole
        ],
        [
            {"name": m["name"], "what": m["what"], "outcome": outcomes[m["what"]]["outcome"]}
            for m in mistakes
            if m["what"] in outcomes
        ],
    )
    mutation_table.main(["--write"])


def _one_run_at_a_time() -> None:
    """Hold .mutation/lock for the rest of this process: a second run would rewrite the copy the first
    one's mutants are in."""
    import fcntl

    lock = (STATE / "lock").open("w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit("another scripts/mutation run is using .mutation/work; wait for it to end")
    globals()["_LOCK"] = lock  # kept open (and locked) until the process ends


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("modules", nargs="*", help="run only modules whose name starts with one of these")
    parser.add_argument("--report", action="store_true", help="print the last results, run nothing")
    parser.add_argument("--fresh", action="store_true", help="forget earlier results of the chosen modules")
    parser.add_argument("--mistakes", action="store_true", help="run only the hand-written mistakes ([[mistake]])")
    parser.add_argument(
        "--record",
        action="store_true",
        help="write the last results to scripts/mutation-results.toml, docs/testing.md",
    )
    args = parser.parse_args()
    config = tomllib.loads((ROOT / "scripts" / "mutation.toml").read_text())
    # In the order asked for (each name a prefix), else in file order.
    chosen = [m for prefix in args.modules or [""] for m in config["module"] if m["name"].startswith(prefix)]
    chosen = [m for i, m in enumerate(chosen) if m not in chosen[:i]]
    prefixes = args.modules or [""]
    mistakes = [e for e in config.get("mistake", []) if any(e["name"].startswith(p) for p in prefixes)]
    if args.mistakes:
        chosen = []
    if not chosen and not mistakes:
        sys.exit(f"no module matches {args.modules}; the modules are {', '.join(m['name'] for m in config['module'])}")
    STATE.mkdir(exist_ok=True)
    if not (args.report or args.record):
        _one_run_at_a_time()
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        sync_copy()
        for module in chosen:
            run_module(module, config["run"], args.fresh)
        _mistakes.run(mistakes, WORK, STATE, VENV / "python")
    scores = [score(m, config["run"], config.get("equivalent", [])) for m in chosen]
    if args.record:
        record(scores, mistakes)
    text = "\n".join([report(scores), *_mistakes.lines(mistakes, STATE)])
    print(text)
    (STATE / "last-report.txt").write_text(text + "\n")


if __name__ == "__main__":
    main()
