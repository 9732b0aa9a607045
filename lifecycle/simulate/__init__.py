"""Rehearse ranks of a large job on one machine (`lifecycle simulate`, docs/simulate.md).

Each chosen rank runs the real engine on torch's fake process-group backend, one after another;
where megatron placed it is checked against `RankGenerator` computed without any process group.
`--scale` counts what the whole job asks of its store host (`scale_report`: the real rank watch of
every rank against a counting store, `StoreHost`) and the process groups a rank creates
(`count_groups`), under each creation of megatron's groups (`distributed.groups`), whose parallel
states `compare_creations` compares. Imports neither torch nor megatron; its functions do when they run.
"""

from __future__ import annotations

from lifecycle.simulate._equality import Difference as Difference
from lifecycle.simulate._equality import compare_creations as compare_creations
from lifecycle.simulate._equality import differences as differences
from lifecycle.simulate._equality import parallel_state_snapshot as parallel_state_snapshot
from lifecycle.simulate._equality import snapshot_after as snapshot_after
from lifecycle.simulate._layout import Layout, sample_ranks
from lifecycle.simulate._layout import format_ranks as format_ranks
from lifecycle.simulate._layout import parse_ranks as parse_ranks
from lifecycle.simulate._plan import Plan
from lifecycle.simulate._plan import plan_text as plan_text
from lifecycle.simulate._plan import startup_plan as startup_plan
from lifecycle.simulate._scale import count_watch
from lifecycle.simulate._scale import scale_report as scale_report
from lifecycle.simulate._scale import scale_text as scale_text
from lifecycle.simulate._simulation import RankReport as RankReport
from lifecycle.simulate._simulation import Simulation, prepare, simulate
from lifecycle.simulate._simulation import SimulationResult as SimulationResult
from lifecycle.simulate._store import StoreHost

__all__ = [
    "Layout",
    "Plan",
    "Simulation",
    "StoreHost",
    "count_watch",
    "prepare",
    "sample_ranks",
    "simulate",
]
