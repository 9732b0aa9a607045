"""The engine: `Lifecycle` (the driver API over `states.TABLE` on a `transitions` machine), its
guards, tripwires and side-effect rules, and the light in-process phases.

Imports neither torch nor megatron; the default phases (`lifecycle.megatron`) import them when
they run.
"""

from __future__ import annotations

from lifecycle.engine import _failures
from lifecycle.engine._driver import Lifecycle, TripwirePolicy
from lifecycle.engine._failures import SignalTrap, shut_down_open, track
from lifecycle.engine._inprocess import InProcessPhases, SimChunk, SimConfig, copying_provider
from lifecycle.engine._ledger import Ledger, LedgerEntry
from lifecycle.engine._machine import MachineModel, build_raw_machine
from lifecycle.engine._tripwires import TARGETS as TRIPWIRE_TARGETS
from lifecycle.engine._tripwires import patched_targets
from lifecycle.engine._warnings import quiet_library_loggers


def open_lifecycles() -> list[Lifecycle]:
    """The lifecycles of this process not shut down yet (those interpreter exit shuts down). One left
    mid-startup keeps its SIGTERM/SIGINT handlers and signal watch: a later signal is its to take."""
    return [lc for lc in list(_failures._OPEN) if isinstance(lc, Lifecycle)]


__all__ = [
    "TRIPWIRE_TARGETS",
    "InProcessPhases",
    "Ledger",
    "LedgerEntry",
    "Lifecycle",
    "MachineModel",
    "SignalTrap",
    "SimChunk",
    "SimConfig",
    "TripwirePolicy",
    "build_raw_machine",
    "copying_provider",
    "open_lifecycles",
    "patched_targets",
    "quiet_library_loggers",
    "shut_down_open",
    "track",
]
