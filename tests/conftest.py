from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lifecycle import InProcessPhases, Lifecycle, RunConfig
from states import State


@pytest.fixture
def make_lc(tmp_path: Path) -> Iterator[object]:
    """Factory for in-process lifecycles that are shut down after the test."""
    made: list[Lifecycle] = []

    def make(*, plan: str | None = None, phases: object = None, tripwires: str = "raise",
             provider: object = None, config: RunConfig | None = None, log_dir: Path | None = None) -> Lifecycle:
        lc = Lifecycle(config or RunConfig(), provider, log_dir or tmp_path / "logs", plan=plan,
                       phases=phases or InProcessPhases(), tripwires=tripwires,  # type: ignore[arg-type]
                       options={"keep_records": True})
        made.append(lc)
        return lc

    yield make
    for lc in made:
        if lc.state is not State.SHUT_DOWN:
            lc.shutdown()
