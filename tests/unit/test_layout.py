"""The layout rules of docs/architecture.md that import-linter does not check: sizes, and the folders.
The size caps count code lines: not blank lines, comment lines or docstrings, so that explaining a
module never costs it room."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("states", "bindings", "lifecycle")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 40
# Modules and functions allowed over the caps, with their lines: debt to split, never to grow; a name
# leaves when it fits. Empty: a new entry needs a reason beside it.
OVER_MODULE_CAP: dict[str, int] = {}
OVER_FUNCTION_CAP: dict[str, int] = {}


def _prose_lines(tree: ast.Module) -> set[int]:
    """The lines of the module's, its classes' and its functions' docstrings."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def code_lines(source: str) -> list[int]:
    """The numbers of the lines that hold code: not blank, not only a comment, not in a docstring."""
    prose = _prose_lines(ast.parse(source))
    return [
        n
        for n, line in enumerate(source.splitlines(), start=1)
        if n not in prose and line.strip() and not line.lstrip().startswith("#")
    ]


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _over(found: dict[str, int], allowed: dict[str, int]) -> dict[str, int]:
    """What is over its cap and not allowed, or over the size it was allowed."""
    return {name: n for name, n in found.items() if n > allowed.get(name, 0)}


def test_no_module_is_over_400_code_lines() -> None:
    sizes = {str(p.relative_to(ROOT)): len(code_lines(p.read_text())) for p in _modules()}
    long = {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES}
    assert _over(long, OVER_MODULE_CAP) == {}
    assert set(OVER_MODULE_CAP) <= set(long), "split: take it off OVER_MODULE_CAP"


def test_no_function_is_over_40_code_lines() -> None:
    long: dict[str, int] = {}
    for path in _modules():
        source = path.read_text()
        code = code_lines(source)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
                length = sum(1 for n in code if node.lineno <= n <= node.end_lineno)
                if length > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.name}"] = length
    assert _over(long, OVER_FUNCTION_CAP) == {}
    assert set(OVER_FUNCTION_CAP) <= set(long), "split: take it off OVER_FUNCTION_CAP"


def test_the_caps_count_code_not_docstrings_comments_or_blank_lines() -> None:
    source = '''"""A module's docstring,
on two lines."""

import os  # a comment after code counts


def f() -> int:
    """A function's docstring."""
    # a comment line
    x = """a string that is not a docstring"""
    return len(x)


class C:
    """A class's docstring."""

    y = 1
'''
    assert code_lines(source) == [4, 7, 10, 11, 14, 17]


def test_lifecycle_is_made_of_named_parts() -> None:
    """Only the package's entry points and the error tree live at lifecycle/'s top level (the
    testing module is a package: `lifecycle/testing/`)."""
    top = sorted(p.name for p in (ROOT / "lifecycle").glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "errors.py"]


def test_the_private_module_contract_flags_an_import_from_outside_the_package_only() -> None:
    import grimp

    from tests.contracts import PrivateModulesContract

    graph = grimp.ImportGraph()
    for importer, imported in (("pkg.a._impl", "pkg.a._helpers"), ("pkg.a", "pkg.a._impl"), ("pkg.b.x", "pkg.a._impl")):
        graph.add_import(importer=importer, imported=imported, line_number=1, line_contents="")
    contract = PrivateModulesContract("private", {}, {"containers": ["pkg"]})
    check = contract.check(graph, verbose=False)
    assert not check.kept and check.metadata["broken"] == [("pkg.b.x", "pkg.a._impl", 1)]


def test_the_private_module_contract_lets_only_the_allowed_module_and_its_parts_import_internals() -> None:
    import grimp

    from tests.contracts import PrivateModulesContract

    graph = grimp.ImportGraph()
    for importer in ("pkg.testing", "pkg.testing._fuzz", "pkg.testing_more"):
        graph.add_import(importer=importer, imported="pkg.a._impl", line_number=1, line_contents="")
    contract = PrivateModulesContract("private", {}, {"containers": ["pkg"], "allowed": ["pkg.testing"]})
    check = contract.check(graph, verbose=False)
    assert check.metadata["broken"] == [("pkg.testing_more", "pkg.a._impl", 1)]


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_no_import_cycle_among_modules_except_type_only_ones() -> None:
    import grimp

    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert _cycles(edges) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
