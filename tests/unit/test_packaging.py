"""The project's own build: what `pip install` prints comes from the project's metadata, read here as
setuptools reads it when it builds the wheel."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import tomllib

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"


def test_setuptools_reads_the_projects_metadata_without_a_deprecation_warning() -> None:
    setuptools = pytest.importorskip("setuptools")
    from setuptools.config.pyprojecttoml import apply_configuration

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        dist = apply_configuration(setuptools.Distribution(), str(PYPROJECT))
    deprecations = [str(w.message).splitlines()[0] for w in seen if "deprecat" in str(w.message).lower()]
    assert deprecations == []
    assert dist.metadata.license_expression == "Apache-2.0"


def test_the_build_asks_for_a_setuptools_that_reads_an_spdx_license() -> None:
    build = tomllib.loads(PYPROJECT.read_text())["build-system"]["requires"]
    assert build == ["setuptools>=77"]  # PEP 639 license expressions came with setuptools 77.0
