"""What the drop-in replaces to run `megatron.training`'s CUDA paths on CPU (`Patched`) is put back
exactly: each attribute as it was, newest first (two patches of one attribute end with the first
value), an attribute that did not exist removed again, a second restore a no-op. The patches
themselves, on torch and megatron, are tests/integration/test_lm_dropin_runs_cuda_paths_on_cpu.py's."""

from __future__ import annotations

import types

from lifecycle.testing import Patched


def owner() -> types.SimpleNamespace:
    return types.SimpleNamespace(is_available=lambda: False, count=0)


def test_each_patched_attribute_is_replaced_then_put_back() -> None:
    cuda = owner()
    original = cuda.is_available
    patched = Patched().install([(cuda, "is_available", "stand-in"), (cuda, "count", 1)])  # type: ignore[list-item]
    assert (cuda.is_available, cuda.count, patched.installed) == ("stand-in", 1, True)
    patched.restore()
    assert (cuda.is_available, cuda.count, patched.installed) == (original, 0, False)


def test_an_attribute_that_did_not_exist_is_removed_again() -> None:
    cuda = owner()
    patched = Patched().install([(cuda, "capturing", False)])  # type: ignore[list-item]
    assert cuda.capturing is False
    patched.restore()
    assert not hasattr(cuda, "capturing")


def test_an_attribute_patched_twice_ends_with_what_was_there_first() -> None:
    cuda = owner()
    patched = Patched().install([(cuda, "count", 1)])  # type: ignore[list-item]
    patched.install([(cuda, "count", 2), (cuda, "new", 1)])  # type: ignore[list-item]
    assert cuda.count == 2
    patched.restore()
    assert cuda.count == 0 and not hasattr(cuda, "new")


def test_a_second_restore_changes_nothing() -> None:
    cuda = owner()
    patched = Patched().install([(cuda, "count", 1)])  # type: ignore[list-item]
    patched.restore()
    cuda.count = 5  # set by someone else since
    patched.restore()
    assert cuda.count == 5 and not patched.installed


def test_nothing_installed_is_nothing_to_restore() -> None:
    patched = Patched().install([])
    assert not patched.installed
    patched.restore()
