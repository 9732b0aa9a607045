"""Which nvidia-resiliency-ext may sit beside which megatron-core: the decision, without importing
either (megatron-core 0.19.2 cannot be imported beside nvidia-resiliency-ext 0.4.1)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from pathlib import Path

import pytest

from lifecycle.errors import ConfigError
from lifecycle.testing import installed_problem, megatron_nvrx_minimum, pair_problem, refuse_incompatible

NVRX = "nvidia-resiliency-ext"


def test_megatron_core_0_19_beside_nvrx_0_4_is_refused_in_one_line_naming_both() -> None:
    problem = pair_problem("0.19.2", "0.4.1", "0.6.0")
    assert problem is not None and "\n" not in problem
    assert "megatron-core 0.19.2" in problem and "nvidia-resiliency-ext 0.4.1" in problem and ">= 0.6.0" in problem
    with pytest.raises(ConfigError, match="megatron-core 0.19.2 cannot be imported") as caught:
        refuse_incompatible(problem)
    assert caught.value.field == "resilience"


@pytest.mark.parametrize(
    ("megatron", "nvrx", "minimum"),
    [
        ("0.15.3", "0.4.1", None),  # the floor: no import-time check
        ("0.16.1", "0.4.1", None),
        ("0.19.2", "0.6.0", "0.6.0"),
        ("0.19.2", "0.7.1rc1", "0.6.0"),
    ],
)
def test_compatible_pairs_pass(megatron: str, nvrx: str, minimum: str | None) -> None:
    assert pair_problem(megatron, nvrx, minimum) is None
    refuse_incompatible(pair_problem(megatron, nvrx, minimum))


def test_a_missing_nvrx_is_named_with_the_extra() -> None:
    problem = pair_problem("0.19.2", None, "0.6.0")
    assert problem is not None and "[resilience]" in problem and "megatron-core 0.19.2" in problem


def test_the_minimum_is_read_from_the_installed_megatron_core_source() -> None:
    """Where megatron-core ships dist_checkpointing/strategies/nvrx.py (0.19.2), its NVRX_MIN_VERSION
    is found without importing megatron; where it does not (0.15.3), there is no minimum."""
    try:
        version = importlib.metadata.version("megatron-core")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("megatron-core is not installed")
    spec = importlib.util.find_spec("megatron")
    assert spec is not None and spec.submodule_search_locations
    source = Path(next(iter(spec.submodule_search_locations))) / "core/dist_checkpointing/strategies/nvrx.py"
    expected = None
    if source.is_file():
        line = next(x for x in source.read_text().splitlines() if x.startswith("NVRX_MIN_VERSION"))
        expected = line.split("=")[1].strip().strip("\"'")
    assert megatron_nvrx_minimum() == expected, version


class Environment:
    """A site directory standing in for the environment's: the distributions installed in it and the
    files of its `megatron` package, the one entry of `sys.path` while a test runs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.site = root / "site"

    def install(self, name: str, version: str) -> None:
        info = self.site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")

    def megatron_nvrx_source(self, text: str, *, under: str = "site") -> None:
        """megatron-core's dist_checkpointing/strategies/nvrx.py, in the directory `under` of the path."""
        path = self.root / under / "megatron/core/dist_checkpointing/strategies/nvrx.py"
        path.parent.mkdir(parents=True)
        path.write_text(text)


@pytest.fixture
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Environment:
    (tmp_path / "site").mkdir()
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site")])
    monkeypatch.delitem(sys.modules, "megatron", raising=False)
    importlib.invalidate_caches()
    return Environment(tmp_path)


def test_the_installed_megatron_core_is_refused_beside_an_nvrx_older_than_its_source_wants(
    environment: Environment,
) -> None:
    """The minimum is the one megatron-core's source names, not the 0.6.0 of 0.19.2."""
    environment.install("megatron-core", "0.21.0")
    environment.install(NVRX, "0.6.0")
    environment.megatron_nvrx_source('import logging\n\nNVRX_MIN_VERSION = "0.7.0"\n')
    problem = installed_problem()
    assert problem is not None
    assert "megatron-core 0.21.0 cannot be imported beside nvidia-resiliency-ext 0.6.0 (it wants >= 0.7.0)" in problem


def test_a_megatron_core_that_checks_a_minimum_it_does_not_spell_as_expected_wants_0_6_0(
    environment: Environment,
) -> None:
    environment.install("megatron-core", "0.19.2")
    environment.install(NVRX, "0.4.1")
    environment.megatron_nvrx_source("from .minimums import NVRX_MIN_VERSION\n")
    assert megatron_nvrx_minimum() == "0.6.0"
    problem = installed_problem()
    assert problem is not None and "(it wants >= 0.6.0)" in problem


def test_a_megatron_core_without_the_import_time_check_passes_beside_nvrx_0_4(environment: Environment) -> None:
    """megatron-core 0.15.3 and 0.16.1 ship no nvrx.py: no minimum, and 0.4.1 beside them is fine."""
    environment.install("megatron-core", "0.16.1")
    environment.install(NVRX, "0.4.1")
    (environment.site / "megatron/core").mkdir(parents=True)
    assert megatron_nvrx_minimum() is None
    assert installed_problem() is None


def test_the_minimum_is_found_when_megatron_is_split_over_two_directories(environment: Environment) -> None:
    """`megatron` is a namespace package: another distribution's part of it (here `megatron/training`,
    as Megatron-LM's) may come first on the path, without megatron-core's nvrx.py."""
    (environment.site / "megatron/training").mkdir(parents=True)
    environment.megatron_nvrx_source('NVRX_MIN_VERSION = "0.7.0"\n', under="later")
    sys.path.append(str(environment.root / "later"))
    importlib.invalidate_caches()
    assert megatron_nvrx_minimum() == "0.7.0"


def test_a_missing_nvrx_in_the_environment_is_named_with_the_extra(environment: Environment) -> None:
    environment.install("megatron-core", "0.19.2")
    environment.megatron_nvrx_source('NVRX_MIN_VERSION = "0.6.0"\n')
    problem = installed_problem()
    assert problem is not None and problem.startswith("in-process restart needs nvidia-resiliency-ext")
    assert "megatron-core 0.19.2" in problem and "'megatron-lifecycle[resilience]'" in problem


@pytest.mark.parametrize(
    ("nvrx", "named"), [("0.6.0", "nvidia-resiliency-ext 0.6.0"), (None, "nvidia-resiliency-ext (missing)")]
)
def test_a_missing_megatron_core_is_named_with_the_nvrx_beside_it(
    environment: Environment, nvrx: str | None, named: str
) -> None:
    if nvrx is not None:
        environment.install(NVRX, nvrx)
    assert installed_problem() == f"the resilience extra needs megatron-core; install it beside {named}"
