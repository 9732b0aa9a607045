"""The log directory has one owner (`lifecycle.log.LogDir`): it alone asks whether the directory can
hold the startup log, so `lifecycle run`, a lifecycle driven from code and `lifecycle simulate` refuse
one directory in the same words. The engine that opens the log imports no export (the live spans
attach from outside it, `lifecycle/__init__.py`), and only its driver assigns the runtime."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from lifecycle import ConfigError, InProcessPhases, Lifecycle, RunConfig
from lifecycle.cli import main

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "lifecycle" / "engine"


def _trees(folder: Path, mentioning: str = "") -> dict[str, ast.Module]:
    """The modules under `folder` whose text holds `mentioning`, parsed (only those: parsing is the cost)."""
    texts = {str(p.relative_to(ROOT)): p.read_text() for p in sorted(folder.rglob("*.py"))}
    return {path: ast.parse(text) for path, text in texts.items() if mentioning in text}


def _called(node: ast.AST, name: str) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Name) and func.id == name) or (isinstance(func, ast.Attribute) and func.attr == name)


def _assigned(node: ast.AST) -> list[ast.expr]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return [t for target in targets for t in (target.elts if isinstance(target, ast.Tuple) else [target])]


def test_a_log_dir_that_cannot_be_created_is_refused_in_the_same_words_by_a_lifecycle_and_by_simulate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "f").write_text("a file, not a directory")
    log_dir = tmp_path / "f" / "logs"
    why = f"log_dir {str(log_dir)!r} cannot be created under {str(tmp_path / 'f')!r}: choose a writable location"
    lc = Lifecycle(RunConfig.from_dict({}), log_dir=log_dir, phases=InProcessPhases(), tripwires="off")
    with pytest.raises(ConfigError) as info:
        lc.validate()
    lc.shutdown()
    assert info.value.field == "logging.log_dir" and info.value.problems == [why]
    assert str(info.value).startswith(f"logging.log_dir: {why} ")
    assert str(info.value).endswith("because logging.log_dir cannot take it (above).")
    capsys.readouterr()  # the lifecycle's records, sent to stderr
    assert main(["simulate", "--preset", "tiny-gpt", "--log-dir", str(log_dir)]) == 2
    assert capsys.readouterr().err == f"lifecycle simulate: --log-dir: {why}.\n"


def test_the_log_directory_is_checked_by_its_owner_alone() -> None:
    trees = _trees(ROOT / "lifecycle", "check_log_dir")
    callers = {path for path, tree in trees.items() if any(_called(n, "check_log_dir") for n in ast.walk(tree))}
    assert callers == {"lifecycle/log/_dir.py"}


def test_the_engine_imports_no_export_so_live_spans_attach_from_outside_it() -> None:
    imports = {
        f"{path}: {node.module}"
        for path, tree in _trees(ENGINE, "export").items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lifecycle.export")
    } | {
        f"{path}: {alias.name}"
        for path, tree in _trees(ENGINE, "export").items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name.startswith("lifecycle.export")
    }
    assert imports == set()


RUN_WITHOUT_OTEL = """
import sys
from lifecycle import InProcessPhases, Lifecycle, RunConfig
from states import State
lc = Lifecycle(RunConfig.from_dict({}), log_dir=sys.argv[1], phases=InProcessPhases(), tripwires="off")
lc.advance_to(State.CALLBACKS_BOUND)
lc.shutdown()
print(sorted(m for m in sys.modules if m.startswith("lifecycle.export")))
"""


def test_a_run_without_logging_otel_never_imports_the_export(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", RUN_WITHOUT_OTEL, str(tmp_path / "logs")],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert out.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "logs" / "rank-00000.jsonl").is_file()


def test_only_the_driver_assigns_a_lifecycles_runtime() -> None:
    writers = {
        path
        for path, tree in _trees(ENGINE, "runtime").items()
        for node in ast.walk(tree)
        for target in _assigned(node)
        if isinstance(target, ast.Attribute) and target.attr == "runtime"
    }
    assert writers == {"lifecycle/engine/_driver.py"}
