"""Who this process is in the job: rank, world size and the run id shared by all ranks."""

from __future__ import annotations

import os
import uuid

from lifecycle.config import RunConfig


def rank_of(config: RunConfig) -> int:
    if config.parallel.rank is not None:
        return config.parallel.rank
    return int(os.environ.get("RANK", "0"))


def world_size_of(config: RunConfig) -> int:
    if config.parallel.world_size is not None:
        return config.parallel.world_size
    return int(os.environ.get("WORLD_SIZE", "1"))


def run_id_from_env() -> str:
    for name in ("LIFECYCLE_RUN_ID", "TORCHELASTIC_RUN_ID"):
        if os.environ.get(name) and os.environ[name] != "none":
            return os.environ[name]
    if os.environ.get("MASTER_PORT"):
        return f"{os.environ.get('MASTER_ADDR', 'localhost')}:{os.environ['MASTER_PORT']}"
    return uuid.uuid4().hex[:12]
