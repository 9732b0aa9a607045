"""`Any` in the project's own annotations (parameters, returns, annotated names, `cast`): only
where a value crosses into torch, megatron or a user's code untyped, each such file listed here
with why. A file that gains one fails; so does a listed file that no longer needs its entry, so the
list only shrinks."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("states", "bindings", "lifecycle")

AT_THE_BOUNDARY: dict[str, tuple[int, str]] = {
    "lifecycle/core_entry/distributed.py": (1, "megatron's initialize_model_parallel keywords, of its own types"),
    "lifecycle/core_entry/groups.py": (
        11,
        "megatron's RankGenerator, create_group and its keywords, and torch's process groups, which ship no types",
    ),
    "lifecycle/lm_dropin/entry/_late.py": (1, "whatever a module global of Megatron-LM holds, called as it calls it"),
    "lifecycle/simulate/_equality.py": (2, "megatron's initialize_model_parallel keywords, of its own types"),
    "lifecycle/lm_dropin/driver.py": (1, "Megatron-LM's pretrain's locals(), each of its own parameter's type"),
    "lifecycle/lm_dropin/entry/_bound_once.py": (
        1,
        "megatron's config class, whose unbound methods are called with the instance",
    ),
}
"""Path -> (how many `Any`, why)."""


def _any(node: ast.AST | None) -> int:
    if node is None:
        return 0
    return sum(
        1
        for n in ast.walk(node)
        if (isinstance(n, ast.Name) and n.id == "Any") or (isinstance(n, ast.Attribute) and n.attr == "Any")
    )


def count(tree: ast.AST) -> int:
    """`Any` in `tree`'s annotations and `cast` targets (what the issue counts)."""
    total = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)]
            total += sum(_any(p.annotation) for p in params) + _any(node.returns)
        elif isinstance(node, ast.AnnAssign):
            total += _any(node.annotation)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "cast" and node.args:
            total += _any(node.args[0])
    return total


def counts() -> dict[str, int]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            n = count(ast.parse(path.read_text(encoding="utf-8")))
            if n:
                found[path.relative_to(ROOT).as_posix()] = n
    return found


def test_any_only_where_a_file_says_why() -> None:
    assert counts() == {path: n for path, (n, _) in AT_THE_BOUNDARY.items()}


def test_the_count_sees_every_kind_of_annotation() -> None:
    source = (
        "from typing import Any, cast\n"
        "import typing\n"
        "def f(a: Any, *b: Any, c: list[Any], **d: typing.Any) -> dict[str, Any]: ...\n"
        "x: Any = cast(Any, 1)\n"
        "y: object = cast(int, 1)\n"
    )
    assert count(ast.parse(source)) == 7
