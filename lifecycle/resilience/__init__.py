"""In-process restart on nvidia-resiliency-ext (`pip install 'megatron-lifecycle[resilience]'`).

`InProcessRestart(config, provider, log_dir).run(train)` drives one `Lifecycle` through the
wrapper's cycles: a fault on any rank restarts every rank in the same process, from VALIDATED,
resuming from the latest checkpoint. docs/restart.md. nvidia-resiliency-ext is imported only inside
`_nvrx.py`, so importing this package is cheap and works without it.
"""

from __future__ import annotations

from lifecycle.resilience._call import client_timeout_s, cycle_and_store, injectable
from lifecycle.resilience._compat import installed_problem, megatron_nvrx_minimum, pair_problem
from lifecycle.resilience._nvrx import CallWrapperSlot
from lifecycle.resilience._restart import InProcessRestart, RestartsExhausted, refuse_incompatible
from lifecycle.resilience._sockets import CycleSockets

__all__ = [
    "CallWrapperSlot",
    "CycleSockets",
    "InProcessRestart",
    "RestartsExhausted",
    "client_timeout_s",
    "cycle_and_store",
    "injectable",
    "installed_problem",
    "megatron_nvrx_minimum",
    "pair_problem",
    "refuse_incompatible",
]
