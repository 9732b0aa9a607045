"""Rehearse ranks of a large job on one machine (`lifecycle simulate`, docs/simulate.md).

Each chosen rank runs the real engine on torch's fake process-group backend, one after another;
where megatron placed it is checked against `RankGenerator` computed without any process group.
`--scale` counts what the whole job asks of its store host (`scale_report`: the real rank watch of
every rank against a counting store, `StoreHost`) and the process groups a rank creates
(`count_groups`). Imports neither torch nor megatron; its functions do when they run.
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
from lifecycle.simulate._plan import (
    Plan,
    PlanConstants,
    PlanCounts,
    measure_import,
    measure_store_rtt_s,
    plan_text,
    predict,
    startup_plan,
)
from lifecycle.simulate._scale import (
    ScaleReport,
    count_watch,
    scale_report,
    scale_text,
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
from lifecycle.simulate._store import CountingStore, StoreHost

__all__ = [
    "COORDINATES",
    "GROUPS",
    "UNTIL",
    "CountingStore",
    "GroupCount",
    "Layout",
    "Placement",
    "Plan",
    "PlanConstants",
    "PlanCounts",
    "RankReport",
    "ScaleReport",
    "Simulation",
    "SimulationResult",
    "StoreHost",
    "at_rank",
    "count_groups",
    "count_watch",
    "counting",
    "format_ranks",
    "measure_import",
    "measure_store_rtt_s",
    "observe",
    "parse_ranks",
    "plan_text",
    "predict",
    "prepare",
    "sample_ranks",
    "scale_report",
    "scale_text",
    "shrink",
    "shrunken_gpt_provider",
    "simulate",
    "simulate_rank",
    "startup_plan",
    "warm_up",
]
