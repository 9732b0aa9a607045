"""Every error declares the fields it carries: a raise that passes a keyword its class (or a
base) does not declare as an attribute fails here, so neither mypy nor a reader has to guess what an
error holds, and `exc.field` is typed."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import bindings
import lifecycle.errors
import states

ROOT = Path(__file__).resolve().parents[2]


def _errors() -> dict[str, type[states.LifecycleError]]:
    found = {}
    for module in (states, bindings, lifecycle.errors):
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, states.LifecycleError):
                found[name] = obj
    return found


def declared(cls: type) -> set[str]:
    return {name for klass in cls.__mro__ for name in getattr(klass, "__annotations__", {})}


def undeclared(source: str, errors: dict[str, type[states.LifecycleError]]) -> list[str]:
    """Each `Error(..., key=...)` in `source` whose key `Error` does not declare (`**`: keys unseen)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name not in errors or (isinstance(func, ast.Attribute) and ast.unparse(func.value) == "records"):
            continue  # `records.GuardRejected(...)`: the log record of the same name (lifecycle.log.records)
        fields = declared(errors[name])
        out += [f"{name}({kw.arg or '**'}=) at line {node.lineno}" for kw in node.keywords if kw.arg not in fields]
    return out


def test_every_raise_passes_only_fields_its_error_declares() -> None:
    errors = _errors()
    found = {
        str(path.relative_to(ROOT)): bad
        for package in ("states", "bindings", "lifecycle")
        for path in sorted((ROOT / package).rglob("*.py"))
        if (bad := undeclared(path.read_text(), errors))
    }
    assert found == {}


def test_a_field_the_error_does_not_declare_or_a_splat_is_found() -> None:
    errors = _errors()
    source = "raise ConfigError('x', field='a', problems=[], colour='red')\nraise errors.RankFailed('y', **context)\n"

    assert undeclared(source, errors) == ["ConfigError(colour=) at line 1", "RankFailed(**=) at line 2"]


def test_a_declared_field_reads_back_typed_and_survives_a_pickle() -> None:
    import pickle

    error = lifecycle.errors.LogUnreadable(
        "run/rank0.jsonl:3: not JSON", source="run/rank0.jsonl", line=3, reason="not JSON"
    )
    again = pickle.loads(pickle.dumps(error))

    assert (again.source, again.line, again.reason) == ("run/rank0.jsonl", 3, "not JSON")
    assert {"source", "line", "reason"} <= declared(lifecycle.errors.LogUnreadable)
