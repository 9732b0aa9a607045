"""`object` in the project's own annotations is capped, so that a value's type says what it is.

Counted: every `object` name inside an annotation (parameters, `*args`/`**kwargs`, returns,
annotated names and fields), inside a `cast` target, and inside a type written outside an
annotation (`Foo = dict[str, object]`, `TypeAlias`, `type Foo = ...`). A use of an alias counts
what the alias holds: `Json = object` then `x: Json` counts 1, as `x: object` does, so an alias made
only to hide the word is no reduction. Renaming is not the aim: `object` goes where the value has a
real type (a TypedDict, a msgspec record of `lifecycle/log`, a Protocol, a concrete class, one
JSON-value alias that says what a JSON value is), and stays where any object is truly accepted
(`isinstance` checks, `repr` of an arbitrary value).

The cap (`CAP`) is a ceiling to lower, never to raise: an `object` a change adds is paid for by
typing a value elsewhere.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("states", "bindings", "lifecycle")
CAP = 245
"""The most `object`s the annotations of `states/`, `bindings/` and `lifecycle/` may hold."""


def _objects(node: ast.AST | None, aliases: dict[str, int]) -> int:
    if node is None:
        return 0
    total = 0
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            total += 1 if n.id == "object" else aliases.get(n.id, 0)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):  # a quoted annotation
            try:
                total += _objects(ast.parse(n.value, mode="eval"), aliases)
            except SyntaxError:
                continue
    return total


def _annotations(tree: ast.AST) -> list[ast.AST]:
    """Every annotation and `cast` target in `tree`."""
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)]
            found += [p.annotation for p in params if p.annotation is not None]
            found += [node.returns] if node.returns is not None else []
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "cast" and node.args:
            found.append(node.args[0])
    return found


def _type_expressions(tree: ast.AST, annotations: list[ast.AST]) -> list[ast.AST]:
    """The outermost subscripts outside annotations (`Row = dict[str, object]`, `list[object]()`)."""
    seen = {id(n) for a in annotations for n in ast.walk(a)}
    found: list[ast.AST] = []
    for node in ast.walk(tree):  # breadth first: an outer subscript comes before those inside it
        if isinstance(node, ast.Subscript) and id(node) not in seen:
            found.append(node)
            seen |= {id(n) for n in ast.walk(node)}
    return found


def _local_aliases(tree: ast.Module) -> dict[str, int]:
    """Module-level names bound to a type holding `object` (`Json = object`, `type J = dict[str, object]`)."""
    aliases: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            name, value = node.target.id, node.value
        elif isinstance(node, ast.TypeAlias) and isinstance(node.name, ast.Name):
            name, value = node.name.id, node.value
        else:
            continue
        if isinstance(value, (ast.Name, ast.Subscript, ast.BinOp, ast.Attribute)):
            n = _objects(value, aliases)
            if n:
                aliases[name] = n
    return aliases


def _aliases(trees: dict[str, ast.Module]) -> dict[str, dict[str, int]]:
    """Each module's aliases holding `object`: its own and those it imports from the project."""
    aliases = {module: _local_aliases(tree) for module, tree in trees.items()}
    for _ in range(3):  # re-exports: an alias imported into a package's __init__, imported from there
        for module, tree in trees.items():
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module in aliases:
                    source = aliases[node.module]
                    for a in node.names:
                        if a.name in source:
                            aliases[module][a.asname or a.name] = source[a.name]
    return aliases


def count(tree: ast.Module, aliases: dict[str, int] | None = None) -> int:
    """`object` in `tree`'s annotations, casts and type expressions, an alias counting what it holds."""
    known = aliases if aliases is not None else _local_aliases(tree)
    annotations = _annotations(tree)
    return sum(_objects(a, known) for a in [*annotations, *_type_expressions(tree, annotations)])


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def counts() -> Counter[str]:
    paths = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    trees = {_module(p): (p, ast.parse(p.read_text(encoding="utf-8"))) for p in paths}
    aliases = _aliases({module: tree for module, (_, tree) in trees.items()})
    found: Counter[str] = Counter()
    for module, (path, tree) in trees.items():
        n = count(tree, aliases[module])
        if n:
            found[path.relative_to(ROOT).as_posix()] = n
    return found


def test_object_in_annotations_stays_under_the_cap() -> None:
    found = counts()
    total = sum(found.values())
    worst = "\n".join(f"  {n:4} {path}" for path, n in found.most_common(15))
    print(f"`object` in annotations: {total} (cap {CAP})\n{worst}")
    assert total <= CAP, f"{total} `object`s in annotations, over the cap of {CAP}; the worst files:\n{worst}"


def test_the_count_sees_every_kind_of_annotation() -> None:
    source = (
        "from typing import cast\n"
        "def f(a: object, *b: object, c: list[object], **d: 'object') -> dict[str, object]: ...\n"
        "x: object = cast(object, 1)\n"
        "Row = dict[str, object]\n"
        "y = isinstance(x, object)\n"
        "def g(r: Row) -> Row: ...\n"
    )
    assert count(ast.parse(source)) == 10


def test_an_alias_of_object_counts_at_every_use() -> None:
    source = "Json = object\ndef f(a: Json, b: list[Json]) -> Json: ...\n"
    assert count(ast.parse(source)) == 3
