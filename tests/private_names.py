"""Tests, benchmarks and examples use the packages' public names: the scan and its allow-list.

`a.b._c` is private to package `a.b` (and `_name` to its module). import-linter's graph holds only
the packages, so the private-module contract (tests/contracts.py, `scanned` in pyproject.toml)
reads tests/, benchmarks/ and examples/ with `ast` through this module, and so does
tests/unit/test_public_names.py. A reach-in is an import, a dotted string
(`monkeypatch.setattr("lifecycle.x._y.z", ...)`), an attribute or a `setattr`/`getattr` on a name
an import bound (`distributed._provided_store`), or any of these in Python source held in a string (a
child's script, a provider file). One not in `WHITE_BOX` breaks the contract; so does an entry of
`WHITE_BOX` that no file needs any more, so the list only shrinks. A new test that needs an internal
imports it from `lifecycle.testing` (add it there), which publishes nothing (docs/architecture.md).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("states", "bindings", "lifecycle")
SCANNED = ("tests", "benchmarks", "examples")
# Files that spell private names as data, not to reach them: this list, and the scan's own examples.
NOT_SCANNED = ("tests/private_names.py", "tests/unit/test_public_names.py")
_DOTTED = re.compile(r"^(states|bindings|lifecycle)(\.\w+)+$")

# White-box tests that replace or read a module's internals, each with why it has no public name
# (yet). Paths relative to the repository; values are the private names each file may reach. Empty:
# every internal a test reaches has a public name or comes from `lifecycle.testing`; keep it so.
WHITE_BOX: dict[str, set[str]] = {}


def _private(name: str) -> bool:
    parts = name.split(".")
    return parts[0] in PACKAGES and any(p.startswith("_") and not p.startswith("__") for p in parts[1:])


def _up_to_private(name: str) -> str:
    """`name` cut after its first private part: `a._b.c.d` is a reach into `a._b`."""
    parts = name.split(".")
    cut = next(i for i, p in enumerate(parts[1:], 1) if p.startswith("_") and not p.startswith("__"))
    return ".".join(parts[: cut + 1])


def _imported(tree: ast.AST) -> dict[str, str]:
    """Local name -> the project module or name it is bound to by an import in `tree`."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    bound[root] = root
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return {local: name for local, name in bound.items() if name.split(".")[0] in PACKAGES}


def _dotted(node: ast.expr, bound: dict[str, str]) -> str | None:
    """`x.a.b` as the dotted name it reaches when `x` is bound by an import, else None."""
    attrs: list[str] = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in bound:
        return None
    return ".".join([bound[node.id], *reversed(attrs)])


def _reached(node: ast.AST, bound: dict[str, str]) -> list[str]:
    """What `node` reaches through a name an import bound: `x._y` and `setattr(x, "_y", ...)`,
    `getattr`, `delattr`, `monkeypatch.setattr`/`delattr`."""
    if isinstance(node, ast.Attribute):
        name = _dotted(node, bound)
        return [name] if name else []
    if not (isinstance(node, ast.Call) and len(node.args) >= 2):
        return []
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    target, attr = node.args[0], node.args[1]
    if called not in {"setattr", "getattr", "delattr"} or not isinstance(attr, ast.Constant):
        return []
    owner = _dotted(target, bound)
    return [f"{owner}.{attr.value}"] if owner and isinstance(attr.value, str) else []


def _code(text: str) -> ast.AST | None:
    """`text` parsed when it is Python source with an import (a child's script, a provider file)."""
    if "import " not in text:
        return None
    try:
        return ast.parse(text)
    except SyntaxError:  # prose
        return None


def private_names(source: str) -> set[str]:
    """The private modules and names of the project that `source` reaches: imports, dotted strings
    (`monkeypatch.setattr("a._b.c", ...)`), attributes and `setattr`/`getattr` on imported names
    (cut after their first private part), and all of these in Python source held in a string."""
    found: set[str] = set()
    tree = ast.parse(source)
    bound = _imported(tree)
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            code = None if _DOTTED.match(node.value) else _code(node.value)
            names = [node.value] if code is None else sorted(private_names(node.value))
        else:
            names = [_up_to_private(name) for name in _reached(node, bound) if _private(name)]
        found |= {name for name in names if _private(name)}
    return found


def used(root: Path = ROOT, folders: tuple[str, ...] = SCANNED) -> dict[str, set[str]]:
    """Each scanned file (relative to `root`) that reaches private names, with those names."""
    found: dict[str, set[str]] = {}
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            if name not in NOT_SCANNED and (names := private_names(path.read_text(encoding="utf-8"))):
                found[name] = names
    return found


def unlisted(found: dict[str, set[str]], allowed: dict[str, set[str]]) -> dict[str, list[str]]:
    """The reach-ins of `found` that `allowed` does not list, by file."""
    new = {path: sorted(names - allowed.get(path, set())) for path, names in found.items()}
    return {path: names for path, names in new.items() if names}


def stale(found: dict[str, set[str]], allowed: dict[str, set[str]]) -> dict[str, list[str]]:
    """The entries of `allowed` that no file of `found` needs any more, by file."""
    old = {path: sorted(names - found.get(path, set())) for path, names in allowed.items()}
    return {path: names for path, names in old.items() if names}
