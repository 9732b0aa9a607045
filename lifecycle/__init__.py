"""megatron-lifecycle: Megatron training startup as an explicit, audited finite-state machine.

`import lifecycle` imports neither torch nor megatron; phases import them when they run.
Named parts (each a package, layered one way): `config`, `log`, `runtime`, `core_entry`, `engine`,
`audit`, `cli`; `errors` holds the whole error tree (docs/architecture.md).
"""

from __future__ import annotations

from lifecycle import errors
from lifecycle.config import RunConfig
from lifecycle.engine import InProcessPhases, Lifecycle
from lifecycle.errors import *  # noqa: F403 - the whole error tree, as errors.__all__ lists it
from lifecycle.log import events
from lifecycle.runtime import (
    Around,
    GivenProvider,
    ModelInputs,
    ModelProvider,
    Options,
    Phase,
    PhaseContext,
    Phases,
    PhaseSet,
    Runtime,
    Slot,
    Work,
)

__all__ = [
    "Around",
    "GivenProvider",
    "InProcessPhases",
    "Lifecycle",
    "ModelInputs",
    "ModelProvider",
    "Options",
    "Phase",
    "PhaseContext",
    "PhaseSet",
    "Phases",
    "RunConfig",
    "Runtime",
    "Slot",
    "Work",
    "events",
]
__all__ += errors.__all__  # every public error, listed once in lifecycle/errors.py
