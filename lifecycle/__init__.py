"""megatron-lifecycle: Megatron training startup as an explicit, audited finite-state machine.

`import lifecycle` imports neither torch nor megatron; phases import them when they run.
Named parts (each a package, layered one way): `config`, `log`, `runtime`, `core_entry`, `engine`,
`audit`, `cli`; `errors` holds the whole error tree (docs/architecture.md).

Here, above every part, the live export (`logging.otel`, `lifecycle.export`) is registered to see
each lifecycle's log before it opens: the engine that opens the log imports no export.
"""

from __future__ import annotations

from lifecycle import errors
from lifecycle.config import RunConfig
from lifecycle.engine import InProcessPhases, Lifecycle, before_log_opens
from lifecycle.errors import *  # noqa: F403 - the whole error tree, as errors.__all__ lists it
from lifecycle.log import AuditLog, events
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


def _live_spans(config: RunConfig, log: AuditLog) -> None:
    """`logging.otel`: spans made from the log's records as they are written. `lifecycle.export` is
    imported only then: at every `import lifecycle` it would cost each rank 0.12 s more."""
    if config.logging.otel:
        from lifecycle.export import attach_live_spans

        attach_live_spans(log, config.logging.otel)


before_log_opens(_live_spans)
