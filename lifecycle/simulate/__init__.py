"""Rehearse ranks of a large job on one machine (`lifecycle simulate`, docs/simulate.md).

Each chosen rank runs the real engine on torch's fake process-group backend, one after another;
where megatron placed it is checked against `RankGenerator` computed without any process group.
`count_groups` counts the process groups one rank of the job creates and joins.
Imports neither torch nor megatron; its functions do when they run.
"""

from __future__ import annotations

from lifecycle.simulate._counting import counting
from lifecycle.simulate._groups import GroupCount, count_groups
from lifecycle.simulate._layout import (
    COORDINATES,
    GROUPS,
    Layout,
    Placement,
    format_ranks,
    observe,
    parse_ranks,
    sample_ranks,
)
from lifecycle.simulate._simulation import (
    UNTIL,
    RankReport,
    Simulation,
    SimulationResult,
    at_rank,
    prepare,
    shrink,
    shrunken_gpt_provider,
    simulate,
    simulate_rank,
    warm_up,
)

__all__ = [
    "COORDINATES",
    "GROUPS",
    "UNTIL",
    "GroupCount",
    "Layout",
    "Placement",
    "RankReport",
    "Simulation",
    "SimulationResult",
    "at_rank",
    "count_groups",
    "counting",
    "format_ranks",
    "observe",
    "parse_ranks",
    "prepare",
    "sample_ranks",
    "shrink",
    "shrunken_gpt_provider",
    "simulate",
    "simulate_rank",
    "warm_up",
]
