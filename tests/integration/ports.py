"""A new rendezvous for each run of the rank processes of `run_ranks`, as a new job would have: a port
free at that moment, the same on every rank (the last run's store may still hold its own port)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from lifecycle.launchers.local import free_port

WAIT_S = 300.0
"""How long a rank waits for rank 0's port: the time rank 0 may still spend in the previous run."""


def new_rendezvous(shared: str | Path, name: str) -> int:
    """Set MASTER_PORT for the run `name` to `shared_port(shared, name)`; returns it."""
    os.environ["MASTER_PORT"] = str(shared_port(shared, name))
    return int(os.environ["MASTER_PORT"])


def shared_port(shared: str | Path, name: str) -> int:
    """A port for `name` (a store of its own), the same on every rank: rank 0 takes a port free now
    (`free_port`) and writes it to `shared/port-<name>` (a directory every rank reads, new for each job of
    ranks); the other ranks read it there, polled for at most WAIT_S."""
    path = Path(shared) / f"port-{name}"
    if os.environ.get("RANK", "0") == "0":
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(str(free_port()))
        tmp.replace(path)
    else:
        deadline = time.monotonic() + WAIT_S
        while not path.exists():
            if time.monotonic() >= deadline:
                raise TimeoutError(f"rank 0 wrote no port for run {name!r} to {path} within {WAIT_S:g} s")
            time.sleep(0.05)
    return int(path.read_text())
