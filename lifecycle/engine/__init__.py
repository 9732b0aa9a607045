"""The engine: `Lifecycle` (the driver API over `states.TABLE` on a `transitions` machine), its
guards, tripwires and side-effect rules, and the light in-process phases.

Imports neither torch nor megatron; the default phases (`lifecycle.core_entry`) import them when
they run.
"""

from __future__ import annotations

from lifecycle.engine import _failures
from lifecycle.engine._driver import Lifecycle as Lifecycle
from lifecycle.engine._driver import TripwirePolicy as TripwirePolicy
from lifecycle.engine._failures import shut_down_open
from lifecycle.engine._inprocess import InProcessPhases as InProcessPhases
from lifecycle.engine._inprocess import SimConfig, copying_provider
from lifecycle.engine._shared import before_log_opens
from lifecycle.engine._warnings import quiet_library_loggers as quiet_library_loggers


def open_lifecycles() -> list[Lifecycle]:
    """The lifecycles of this process not shut down yet (those interpreter exit shuts down). One left
    mid-startup keeps its SIGTERM/SIGINT handlers and signal watch: a later signal is its to take."""
    return [lc for lc in list(_failures._OPEN) if isinstance(lc, Lifecycle)]


__all__ = [
    "SimConfig",
    "before_log_opens",
    "copying_provider",
    "open_lifecycles",
    "shut_down_open",
]
