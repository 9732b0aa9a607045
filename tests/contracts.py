"""An import-linter contract type of our own: `_private` modules are private to their package.

Module `a.b._c` (or anything under it) may be imported only by modules inside `a.b`, and by the
modules `allowed` names: `lifecycle.testing`, the one module that hands tests the internals (its
docstring says so; none of it is public). Registered in
pyproject.toml (`contract_types`); `lint-imports` runs it with the built-in contracts. The folders
in `scanned` (tests, benchmarks, examples: not packages, so not in import-linter's graph) are read
by tests/private_names.py instead, which also sees attributes, `setattr` and scripts held in
strings; their reach-ins must be the ones its `WHITE_BOX` lists, no more and no fewer.
"""

from __future__ import annotations

from typing import Any

from importlinter import Contract, ContractCheck, fields, output


def _owner(module: str) -> str | None:
    """The package that owns `module` if it is private (its first `_x` part's parent), else None."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


class PrivateModulesContract(Contract):
    """No module outside a package imports that package's `_private` modules."""

    containers = fields.ListField(subfield=fields.StringField())
    scanned = fields.ListField(subfield=fields.StringField(), required=False, default=[])
    allowed = fields.ListField(subfield=fields.StringField(), required=False, default=[])

    def check(self, graph: Any, verbose: bool) -> ContractCheck:
        roots = tuple(str(c) for c in self.containers)  # type: ignore[attr-defined]
        allowed = tuple(str(a) for a in self.allowed)  # type: ignore[attr-defined]
        broken: list[tuple[str, str, int]] = []
        for imported in sorted(graph.modules):
            owner = _owner(imported)
            if owner is None or not imported.startswith(roots):
                continue
            for importer in sorted(graph.find_modules_that_directly_import(imported)):
                if importer in (owner, *allowed) or importer.startswith((owner + ".", *(a + "." for a in allowed))):
                    continue
                for details in graph.get_import_details(importer=importer, imported=imported):
                    broken.append((importer, imported, details["line_number"]))
        listed = _listed(tuple(str(f) for f in self.scanned))  # type: ignore[attr-defined]
        return ContractCheck(kept=not broken and not any(listed.values()), metadata={"broken": broken, **listed})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for importer, imported, line in check.metadata["broken"]:
            output.print_error(f"{importer} (line {line}) imports {imported}, private to its package")
            output.new_line()
        for path, names in check.metadata.get("unlisted", {}).items():
            output.print_error(f"{path} reaches {', '.join(names)}: use public names (or list it in WHITE_BOX)")
            output.new_line()
        for path, names in check.metadata.get("stale", {}).items():
            output.print_error(
                f"tests/private_names.py WHITE_BOX lists {', '.join(names)} for {path}: no longer needed"
            )
            output.new_line()


def _listed(folders: tuple[str, ...]) -> dict[str, dict[str, list[str]]]:
    """The reach-ins of `folders` that WHITE_BOX does not list, and its entries none needs."""
    if not folders:
        return {}
    from tests.private_names import WHITE_BOX, stale, unlisted, used

    found = used(folders=folders)
    return {"unlisted": unlisted(found, WHITE_BOX), "stale": stale(found, WHITE_BOX)}
