"""Providers and binders that misbehave, for `lifecycle check-binding` (`--provider` / `--binder`
`tests.integration.hostile_callables:NAME`): each ends or hangs its rank without raising."""

from __future__ import annotations

import os
import sys
import time


def exits_zero(*_args: object, **_kwargs: object) -> None:
    """A library that ends the process with status 0 when it is called (no result, no exception)."""
    print("licence server unreachable, exiting quietly", file=sys.stderr, flush=True)
    os._exit(0)


def hangs(*_args: object, **_kwargs: object) -> None:
    """A callable that never returns (waits on something that never comes)."""
    print("hostile_callables.hangs: waiting forever", file=sys.stderr, flush=True)
    time.sleep(3600)
