"""The drop-in's list of the names Megatron-LM's startup looks up in its modules' globals when it runs
(`lifecycle/lm_dropin/entry/_late.py`) against Megatron-LM's source, read with `ast`: a name that
`pretrain` or `initialize_megatron` looks up, or that `train()` binds to a callback slot, which the
list does not cover (a new Megatron-LM release) fails here, and so does a name it lists that the
source no longer looks up."""

from __future__ import annotations

import ast
import builtins
import importlib.util
from pathlib import Path

import pytest

if importlib.util.find_spec("megatron") is None:
    pytest.skip("megatron-core is not installed", allow_module_level=True)
_HOME = Path(next(iter(importlib.util.find_spec("megatron").submodule_search_locations or ())))
if not (_HOME / "training" / "training.py").is_file():
    pytest.skip("megatron-core < 0.17 ships no megatron.training", allow_module_level=True)

from lifecycle.lm_dropin.entry import LOOKUPS  # noqa: E402  # after the skip: needs megatron.training

SLOTS = ("finalize_model_grads_func", "grad_scale_func", "no_sync_func", "grad_sync_func", "param_sync_func")


def source(where: str) -> tuple[ast.Module, ast.FunctionDef]:
    """The parsed module of `module:function`, and the function's definition in it."""
    module, _, function = where.partition(":")
    path = _HOME.parent.joinpath(*module.split(".")).with_suffix(".py")
    tree = ast.parse(path.read_text())
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function]
    assert len(found) == 1, f"{where}: {len(found)} definitions"
    return tree, found[0]


def module_names(tree: ast.Module) -> set[str]:
    """The names the module binds at its top level (imports, definitions, assignments, also under
    `try` and `if`)."""
    names: set[str] = set()
    for top in tree.body:
        if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(top.name)
            continue
        for node in ast.walk(top):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
    return names


def global_lookups(where: str) -> set[str]:
    """The module globals that `module:function`'s body (its nested functions too) reads when it runs."""
    return lookups_in(*source(where))


def lookups_in(tree: ast.Module, fn: ast.FunctionDef) -> set[str]:
    """Names `fn`'s body reads that no scope of it binds, or that it declares `global`, and that its
    module binds. Annotations and defaults are read once, at import, and are left out."""
    body = ast.Module(body=fn.body, type_ignores=[])
    local = {
        a.arg
        for node in ast.walk(fn)
        if isinstance(node, ast.arguments)
        for a in ast.walk(node)
        if isinstance(a, ast.arg)
    }
    declared: set[str] = set()
    for node in ast.walk(body):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            local.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            local |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            local.add(node.name)
        elif isinstance(node, ast.Global):
            declared |= set(node.names)
    read = {n.id for n in ast.walk(body) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    free = {name for name in read if name not in local or name in declared}
    unknown = free - module_names(tree) - set(dir(builtins))
    assert not unknown, f"{fn.name} reads names neither it nor its module binds: {sorted(unknown)}"
    return free & module_names(tree)


def slot_bindings(where: str) -> set[str]:
    """The module globals that `module:function` writes to a callback slot (`config.<slot> = name`)."""
    tree, fn = source(where)
    names = module_names(tree)
    return {
        node.value.id
        for node in ast.walk(fn)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Name)
        and node.value.id in names
        and any(isinstance(t, ast.Attribute) and t.attr in SLOTS for t in node.targets)
    }


@pytest.mark.parametrize(
    "where", ["megatron.training.training:pretrain", "megatron.training.initialize:initialize_megatron"]
)
def test_the_list_names_exactly_the_globals_megatron_lms_startup_looks_up(where: str) -> None:
    assert sorted(global_lookups(where)) == sorted(LOOKUPS[where])


def test_the_list_names_exactly_the_globals_train_binds_to_a_callback_slot() -> None:
    where = "megatron.training.training:train"
    assert slot_bindings(where) == {"finalize_model_grads"}  # what the drop-in's run resolves late
    assert sorted(slot_bindings(where)) == sorted(LOOKUPS[where])


def test_the_source_reader_finds_a_global_look_up_added_to_pretrain() -> None:
    """The reader itself, on pretrain's source with one more module function called in its body (and
    one more local): the new global is found, so the list no longer covers pretrain's look-ups."""
    where = "megatron.training.training:pretrain"
    tree, fn = source(where)
    tree.body.append(ast.parse("def new_hook():\n    pass").body[0])
    fn.body.insert(0, ast.parse("new_hook(local := 1)").body[0])
    found = lookups_in(tree, fn)
    assert found - global_lookups(where) == {"new_hook"}
    assert sorted(found) != sorted(LOOKUPS[where])
