"""tests/unit is the fast layer: no test here may load torch or megatron (tests/integration may)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

HEAVY = ("torch", "megatron")


@pytest.fixture(autouse=True)
def _no_heavy_imports() -> Iterator[None]:
    before = [m for m in HEAVY if m in sys.modules]
    yield
    if before:  # another layer of the suite loaded them first: nothing to tell from here
        return
    loaded = [m for m in HEAVY if m in sys.modules]
    assert not loaded, f"a unit test imported {loaded}: move it to tests/integration"
