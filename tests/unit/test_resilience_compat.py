"""Which nvidia-resiliency-ext may sit beside which megatron-core: the decision, without importing
either (megatron-core 0.19.2 cannot be imported beside nvidia-resiliency-ext 0.4.1)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

import pytest

from lifecycle.errors import ConfigError
from lifecycle.testing import megatron_nvrx_minimum, pair_problem, refuse_incompatible


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
