"""`--provider` and `--binder` specs checked before any rank starts, without running the user's code.

`package.module:function` is found with `importlib.util.find_spec` (which imports the packages above
the module, as any import would, but not the module itself); `path/to/file.py:function` by its
path. The module's source is then parsed, not run: a name it does not define at its top level is
refused. A module that can make names at run time (`from x import *`, a module `__getattr__`,
`globals()`), or has no Python source, is left to the rank.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from lifecycle.core_entry.user_providers import NAMES, spec_problem


def provider_problem(spec: str) -> str | None:
    """Why `--provider spec` cannot be used, in one line, or None (found and read, not run)."""
    return spec_problem(spec) or (None if spec in NAMES else callable_problem("--provider", spec))


def callable_problem(flag: str, spec: str) -> str | None:
    """Why `flag spec` (`module:function` or `file.py:function`) names nothing, in one line, or None."""
    target, _, name = spec.rpartition(":")
    if target.endswith(".py"):
        source = Path(target)
        if not source.is_file():
            return f"{flag} {spec!r}: no file {target!r}; give an existing .py file, relative to the working directory"
    else:
        found = _module_source(flag, spec, target)
        if isinstance(found, str):
            return found
        if found is None:
            return None
        source = found
    try:
        tree = ast.parse(source.read_bytes(), filename=str(source))
    except SyntaxError as exc:
        return f"{flag} {spec!r}: {source} line {exc.lineno} does not parse ({exc.msg}); fix the file"
    except (OSError, ValueError) as exc:
        return f"{flag} {spec!r}: {source} cannot be read ({exc})"
    names = _top_level_names(tree)
    if names is None or name in names:
        return None
    shown = ", ".join(sorted(n for n in names if not n.startswith("_"))[:12]) or "none"
    return f"{flag} {spec!r}: {target} defines no {name!r}; its top-level names: {shown}"


def _module_source(flag: str, spec: str, module: str) -> Path | str | None:
    """The module's .py file; a one-line problem when it is not found; None when it has no source."""
    try:
        found = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        found = None
    except Exception as exc:  # a package above it raised on import: the user's code, reported as a line
        return f"{flag} {spec!r}: importing the packages of {module!r} raised {type(exc).__name__}: {exc}"
    if found is None:
        return (
            f"{flag} {spec!r}: no module {module!r} on the path; put its package on PYTHONPATH "
            "or give path/to/file.py:FUNCTION"
        )
    origin = found.origin
    return Path(origin) if origin and origin.endswith(".py") and Path(origin).is_file() else None


def _top_level_names(tree: ast.Module) -> set[str] | None:
    """The names a module binds outside its functions and classes; None when it may make others."""
    names: set[str] = set()
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == "__getattr__":
                return None
            names.add(node.name)
            continue
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return None
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                names.add(sub.id)
            elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in ("globals", "exec"):
                return None
        todo.extend(child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt))
    return names
