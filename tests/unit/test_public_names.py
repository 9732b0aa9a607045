"""Tests, benchmarks and examples use the packages' public names.

`a.b._c` is private to package `a.b` (and `_name` to its module). import-linter's private-module
contract (pyproject.toml) checks the packages themselves but cannot see tests/, benchmarks/ and
examples/, which are not packages; this reads their sources with `ast`, imports and dotted strings
(`monkeypatch.setattr("lifecycle.x._y.z", ...)`) alike. A reach-in not in `WHITE_BOX` fails; so does
an entry of `WHITE_BOX` that no file needs any more, so the list only shrinks. A new test that needs a
private name asks for a public one (export it from the package's `__init__`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("states", "bindings", "lifecycle")
SCANNED = ("tests", "benchmarks", "examples")
_DOTTED = re.compile(r"^(states|bindings|lifecycle)(\.\w+)+$")

# White-box tests that replace or read a module's internals, each with why it has no public name
# (yet). Paths relative to the repository; values are the private names each file may reach.
WHITE_BOX: dict[str, set[str]] = {
    # The writer's clock and os.write, replaced to place records in time and to fill the disk.
    "tests/integration/fault_child.py": {"lifecycle.log._writer"},
    "tests/unit/test_engine_failures.py": {"lifecycle.log._writer"},
    "tests/unit/audit/audit_logs.py": {
        "lifecycle.log._writer",
        "lifecycle.engine._inprocess",
        "lifecycle.engine._inprocess.SLOTS",
        "lifecycle.engine._inprocess._finalize",
    },
    # Mutation tests (issue 26) of the failure paths' decisions, called directly (scripts/mutation.toml):
    # root causes on synthetic records, the log-directory policy's checks, the signal trap, the
    # ledger, the rank watch's state of one peer, the rendezvous's unreachable-store verdict.
    "tests/unit/audit/test_mutants_cause.py": {
        "lifecycle.audit._cause",
        "lifecycle.audit._cause.root_causes",
        "lifecycle.audit._cause.victim_summary",
        "lifecycle.audit._records",
        "lifecycle.audit._records.Failure",
    },
    "tests/unit/test_mutants_failures.py": {"lifecycle.engine._failures", "lifecycle.engine._failures.SignalTrap"},
    "tests/unit/test_mutants_files.py": {
        "lifecycle.log._files",
        "lifecycle.log._files.ChainEnd",
        "lifecycle.log._files.check_log_dir",
        "lifecycle.log._files.existing_policy_problem",
        "lifecycle.log._files.first_run_id",
        "lifecycle.log._files.inspect_log",
        "lifecycle.log._files.other_run",
        "lifecycle.log._files.own_file_problem",
        "lifecycle.log._files.rank_file",
        "lifecycle.log._files.removable_ranks",
    },
    "tests/unit/test_mutants_ledger.py": {
        "lifecycle.engine._ledger",
        "lifecycle.engine._ledger.Entry",
        "lifecycle.engine._ledger.Ledger",
    },
    "tests/unit/test_mutants_ranks.py": {"lifecycle.megatron.ranks._Active"},
    "tests/unit/test_mutants_rendezvous.py": {"lifecycle.megatron.distributed._store_unreachable"},
    # Mutation tests (issue 26) of checkpoint's decisions, called directly: publishing a save, naming
    # why a load was refused, naming the damaged file (the collective save/load is too slow per mutant).
    "tests/unit/test_mutants_checkpoints.py": {
        "lifecycle.megatron.checkpoint._publish",
        "lifecycle.megatron.checkpoint._reason",
    },
    "tests/integration/test_mutants_checkpoints_torch.py": {"lifecycle.megatron.checkpoint._damaged_file"},
    # The batch decoder's typed records, checked field by field against the per-record handlers.
    "tests/unit/audit/test_audit_batch.py": {
        "lifecycle.audit._feed",
        "lifecycle.audit._feed._TYPES",
        "lifecycle.audit._feed._decode",
        "lifecycle.audit._handlers",
    },
    # The worker pool and the per-input log limit, replaced to test the fallbacks and the cap cheaply;
    # the chain function, replaced to show the audit never re-serializes a record.
    "tests/unit/audit/test_audit_cli.py": {"lifecycle.audit._audit", "lifecycle.log._chain"},
    "tests/unit/audit/test_audit_hostile.py": {"lifecycle.audit._audit"},
    "tests/unit/test_mutants_chain.py": {"lifecycle.audit._audit"},
    # Unit tests of the bindings' and guards' own helpers.
    "tests/unit/test_bindings_check.py": {
        "bindings._check",
        "bindings._check.chunk_list",
        "bindings._check.describe",
        "bindings._check.inspect_slots",
        "bindings._check.judge",
        "bindings._check.judge_binding",
        "bindings._check.reachable_configs",
        "bindings._check.unwrap_finalizer",
        "bindings._guard",
        "bindings._guard.arm",
        "bindings._guard.scale_owner",
    },
    "tests/unit/test_bindings_unit.py": {"bindings._bind", "bindings._bind.install", "bindings._bind.planned"},
    "tests/unit/test_guards.py": {"states._guards"},
    "tests/unit/test_mutants_states.py": {"states._guards"},
    # The process-wide warning capture, read to show it is uninstalled.
    "tests/unit/test_warnings_capture.py": {"lifecycle.engine._warnings"},
    # The TCP stores DISTRIBUTED keeps per process, counted to show re-initialization reuses them.
    "benchmarks/rehearsal.py": {"lifecycle.megatron.distributed._STORES"},
}


def _private(name: str) -> bool:
    parts = name.split(".")
    return parts[0] in PACKAGES and any(p.startswith("_") and not p.startswith("__") for p in parts[1:])


def private_names(source: str) -> set[str]:
    """The private modules and names of the project that `source` imports or spells as a dotted string."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _DOTTED.match(node.value):
            names = [node.value]
        found |= {name for name in names if _private(name)}
    return found


def test_the_scan_finds_every_form_of_reaching_in() -> None:
    source = """
import lifecycle.audit._audit as a
from lifecycle.log._lock import LOCK_NAME
from lifecycle.audit import _feed, audit
from states._guards import g
monkeypatch.setattr("lifecycle.megatron.distributed._STORES", {})
from lifecycle.audit import RankAudit
import lifecycle.__main__
"""
    assert private_names(source) == {
        "lifecycle.audit._audit",
        "lifecycle.log._lock",
        "lifecycle.log._lock.LOCK_NAME",
        "lifecycle.audit._feed",
        "states._guards",
        "states._guards.g",
        "lifecycle.megatron.distributed._STORES",
    }


def test_tests_benchmarks_and_examples_reach_no_private_name_outside_the_white_box_list() -> None:
    used: dict[str, set[str]] = {}
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == Path(__file__).resolve():  # its examples and its list spell private names
                continue
            names = private_names(path.read_text(encoding="utf-8"))
            if names:
                used[path.relative_to(ROOT).as_posix()] = names
    new = {path: sorted(names - WHITE_BOX.get(path, set())) for path, names in used.items()}
    new = {path: names for path, names in new.items() if names}
    assert not new, f"private names reached from outside their package; export public ones: {new}"
    stale = {path: sorted(names - used.get(path, set())) for path, names in WHITE_BOX.items()}
    stale = {path: names for path, names in stale.items() if names}
    assert not stale, f"WHITE_BOX entries no file needs any more; delete them: {stale}"
