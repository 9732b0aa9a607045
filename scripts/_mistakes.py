"""The hand-written mistakes of scripts/mutation.toml (`[[mistake]]`): one-line bugs a reviewer could
miss, which the operators do not make (a prefix for an exact name, a missing value taken as equal, the
last writer for the first, a call left out). Each is applied in the copy (.mutation/work), its tests
run, and the copy's file put back: caught when the tests fail (pytest's exit status 1).

    [[mistake]]
    name = "bindings.settings"      # chosen as modules are: by name prefix
    path = "bindings/_settings.py"
    code = "..."                    # the text it replaces: exactly once in the file, else the entry is stale
    mistake = "..."                 # what it is replaced with
    tests = ["tests/unit/test_settings.py"]
    what = "allow_mismatch matched by prefix"
    ignore_sigint = true            # optional: the tests start with SIGINT ignored (as `cmd &` without
                                    # job control starts them)
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path


def _fingerprint(entry: dict, work: Path) -> str:
    digest = hashlib.sha256(repr(sorted(entry.items())).encode())
    for name in [entry["path"], *(t.split("::")[0] for t in entry["tests"]), "tests/conftest.py"]:
        path = work / name
        digest.update(path.read_bytes() if path.exists() else b"-")
    return digest.hexdigest()


def _pytest(python: Path, work: Path, tests: list[str], ignore_sigint: bool = False) -> int:
    command = [str(python), "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--no-header", "-W", "ignore", *tests]
    start = _ignoring_sigint if ignore_sigint else None
    return subprocess.run(command, cwd=work, env=_env(work), capture_output=True, preexec_fn=start).returncode


def _ignoring_sigint() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _env(work: Path) -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(work)}


def run(entries: list[dict], work: Path, state: Path, python: Path) -> None:
    """Apply each entry in `work`, run its tests, record the outcome in `state`/mistakes.json (kept
    while the entry, its file and its tests are unchanged)."""
    results = load(state)
    passing: dict[tuple[tuple[str, ...], bool], bool] = {}
    for entry in entries:
        key, path = _fingerprint(entry, work), work / entry["path"]
        if results.get(entry["what"], {}).get("fingerprint") == key:
            continue
        original = path.read_text()
        if original.count(entry["code"]) != 1:
            outcome = "stale"  # the line changed or moved: the entry must be written again
        else:
            tests, ignoring = tuple(entry["tests"]), bool(entry.get("ignore_sigint"))
            if (tests, ignoring) not in passing:  # they must pass without the mistake, else all look caught
                passing[tests, ignoring] = _pytest(python, work, list(tests), ignoring) == 0
            if not passing[tests, ignoring]:
                outcome = "tests fail without it"
            else:
                try:
                    path.write_text(original.replace(entry["code"], entry["mistake"]))
                    caught = _pytest(python, work, list(tests), ignoring) == 1
                    outcome = "caught" if caught else "SURVIVED"
                finally:
                    path.write_text(original)
        results[entry["what"]] = {"fingerprint": key, "outcome": outcome}
        print(f"mistake {entry['name']}: {outcome}: {entry['what']}", flush=True)
        (state / "mistakes.json").write_text(json.dumps(results, indent=1))


def load(state: Path) -> dict[str, dict[str, str]]:
    file = state / "mistakes.json"
    return json.loads(file.read_text()) if file.exists() else {}


def lines(entries: list[dict], state: Path) -> list[str]:
    """One line per entry: its outcome (`not run` when it never ran), its name, what it is, its file."""
    results = load(state)
    return [
        f"{results.get(e['what'], {}).get('outcome', 'not run'):<10} {e['name']}: {e['what']} ({e['path']})"
        for e in entries
    ]
