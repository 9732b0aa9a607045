"""The version floor: `lifecycle.lm_dropin` needs megatron-core>=0.17 (its wheel ships
`megatron.training`). Below it, importing the package raises ExtraNotInstalled naming the version
and the extra, and the rest of the lifecycle keeps working. Runs in either environment: on the
floor it imports for real; on 0.17+ it reads an older version from the package metadata."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys

import pytest

from lifecycle.errors import ExtraNotInstalled

HAS_TRAINING = importlib.util.find_spec("megatron.training") is not None


def _import_fresh() -> None:
    sys.modules.pop("lifecycle.lm_dropin", None)
    importlib.import_module("lifecycle.lm_dropin")


@pytest.mark.skipif(HAS_TRAINING, reason="megatron.training is installed: the floor's import is shown below")
def test_on_the_floor_the_import_names_the_version_it_needs() -> None:
    with pytest.raises(ExtraNotInstalled, match=r"megatron-core>=0\.17.*installed: 0\.1[0-6]") as caught:
        _import_fresh()
    assert caught.value.extra == "megatron-lm"
    assert "megatron-lifecycle[megatron-lm]" in str(caught.value)


def test_an_older_megatron_core_is_refused_by_version_not_by_a_failed_import(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.15.3")
    with pytest.raises(ExtraNotInstalled, match=r"installed: 0\.15\.3"):
        _import_fresh()
    sys.modules.pop("lifecycle.lm_dropin", None)


def test_the_rest_of_the_lifecycle_imports_and_runs_without_it() -> None:
    code = (
        "import lifecycle, lifecycle.cli, lifecycle.core_entry, lifecycle.engine\n"
        "try:\n    import lifecycle.lm_dropin\n"
        "except lifecycle.ExtraNotInstalled as e:\n    print('refused', e.extra)\n"
        "import sys; print('torch' in sys.modules, 'megatron.core' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("False False")
    assert ("refused megatron-lm" in done.stdout) is not HAS_TRAINING
