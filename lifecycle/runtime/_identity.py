"""Who this process is in the job: rank, world size and the run id shared by all ranks.

The one place that reads the launcher's identity variables.
"""

from __future__ import annotations

import os
import uuid

from lifecycle.config import RunConfig


def rank_of(config: RunConfig) -> int:
    """`parallel.rank`, else the launcher's RANK, else 0."""
    if config.parallel.rank is not None:
        return config.parallel.rank
    return int(os.environ.get("RANK", "0"))


def world_size_of(config: RunConfig) -> int:
    """`parallel.world_size`, else the launcher's WORLD_SIZE, else 1."""
    if config.parallel.world_size is not None:
        return config.parallel.world_size
    return int(os.environ.get("WORLD_SIZE", "1"))


def new_run_id() -> str:
    """A fresh run id (12 hex digits)."""
    return uuid.uuid4().hex[:12]


def run_id_from_env() -> str:
    """The run id every rank of one job agrees on: LIFECYCLE_RUN_ID, torchrun's run id, the
    rendezvous address, or a fresh one for a single process."""
    for name in ("LIFECYCLE_RUN_ID", "TORCHELASTIC_RUN_ID"):
        if os.environ.get(name) and os.environ[name] != "none":
            return os.environ[name]
    if os.environ.get("MASTER_PORT"):
        return f"{os.environ.get('MASTER_ADDR', 'localhost')}:{os.environ['MASTER_PORT']}"
    return new_run_id()
