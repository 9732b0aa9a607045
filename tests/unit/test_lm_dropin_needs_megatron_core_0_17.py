"""`import lifecycle.lm_dropin` asks megatron-core's metadata for its version (nothing is imported)
and refuses a release older than 0.17, whose wheel ships no `megatron.training`, naming what is
installed and the extra to install; 0.17 and later, pre-releases included, import. The version is
set by standing in for `importlib.metadata.version` and the package is imported afresh (the
floor's real import is tests/integration/test_megatron_lm_floor.py)."""

from __future__ import annotations

import importlib
import importlib.metadata
import subprocess
import sys
from types import ModuleType

import pytest

import lifecycle
import lifecycle.lm_dropin
from lifecycle.errors import ExtraNotInstalled
from lifecycle.lm_dropin import driver


def import_with(monkeypatch: pytest.MonkeyPatch, installed: str | None) -> ModuleType:
    """`lifecycle.lm_dropin` imported afresh with megatron-core `installed` (None: not installed);
    the module imported before is put back after the test."""

    def version(name: str) -> str:
        if name != "megatron-core" or installed is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed

    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.delitem(sys.modules, "lifecycle.lm_dropin", raising=False)  # another test may have taken it out
    monkeypatch.setattr(lifecycle, "lm_dropin", lifecycle.lm_dropin)
    return importlib.import_module("lifecycle.lm_dropin")


@pytest.mark.parametrize("installed", ["0.17.0", "0.17", "0.17.0rc0", "0.17.1.dev3", "0.19.2", "0.100.0", "1.0.0"])
def test_megatron_core_0_17_and_later_imports(monkeypatch: pytest.MonkeyPatch, installed: str) -> None:
    assert import_with(monkeypatch, installed).pretrain is driver.pretrain


@pytest.mark.parametrize("installed", ["0.16.2", "0.16.0rc1", "0.16rc1", "0.15.3", "0.9.1", "0.1"])
def test_an_older_megatron_core_is_refused_naming_the_release_it_has_and_the_extra(
    monkeypatch: pytest.MonkeyPatch, installed: str
) -> None:
    with pytest.raises(ExtraNotInstalled) as caught:
        import_with(monkeypatch, installed)
    message = str(caught.value)
    assert message == (
        "lifecycle.lm_dropin needs megatron-core>=0.17, whose wheel ships megatron.training; "
        f"installed: {installed}. pip install 'megatron-lifecycle[megatron-lm]' (megatron-core>=0.17), "
        "or use lifecycle.Lifecycle with your provider"
    )
    assert (caught.value.extra, caught.value.field) == ("megatron-lm", "megatron-core")


def test_without_megatron_core_the_import_says_none_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ExtraNotInstalled, match=r"installed: none\. pip install"):
        import_with(monkeypatch, None)


def test_the_package_offers_pretrain_and_teardown_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    package = import_with(monkeypatch, "0.17.0")
    assert package.__all__ == ["pretrain", "teardown"]
    with pytest.raises(AttributeError, match="^train$"):
        package.train  # noqa: B018
    with pytest.raises(ImportError, match="cannot import name 'initialize_megatron'"):
        exec("from lifecycle.lm_dropin import initialize_megatron", {})


def test_an_older_megatron_core_is_refused_before_any_of_the_drop_in_is_loaded() -> None:
    code = (
        "import importlib.metadata, sys\n"
        "importlib.metadata.version = lambda name: '0.15.3'\n"
        "try:\n    import lifecycle.lm_dropin\n"
        "except Exception as e:\n    print(type(e).__name__)\n"
        "print(sorted(m for m in sys.modules if m.startswith('lifecycle.lm_dropin')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split("\n")[:2] == ["ExtraNotInstalled", "[]"]
