"""In-process restart on nvidia-resiliency-ext (`pip install 'megatron-lifecycle[resilience]'`).

`InProcessRestart(config, provider, log_dir).run(train)` drives one `Lifecycle` through the
wrapper's cycles: a fault on any rank restarts every rank in the same process, from VALIDATED,
resuming from the latest checkpoint. docs/restart.md. nvidia-resiliency-ext is imported only inside
`_nvrx.py`, so importing this package is cheap and works without it.
"""

from __future__ import annotations

from lifecycle.resilience._call import client_timeout_s
from lifecycle.resilience._call import cycle_and_store as cycle_and_store
from lifecycle.resilience._call import injectable as injectable
from lifecycle.resilience._nvrx import CallWrapperSlot
from lifecycle.resilience._restart import InProcessRestart, RestartsExhausted

__all__ = [
    "CallWrapperSlot",
    "InProcessRestart",
    "RestartsExhausted",
    "client_timeout_s",
]
