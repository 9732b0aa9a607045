"""Who this process is in the job: rank, world size and the run id shared by all ranks.

Read through `lifecycle.launchers`, the one place that knows launchers (torchrun, Open MPI's
mpirun, SLURM's srun) and reads their variables; this module adds what the config says on top.
An identity that cannot be known (several processes, no world size anywhere) is refused.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping

from lifecycle import launchers
from lifecycle.config import RunConfig
from lifecycle.errors import ConfigError


def slurm_identity_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The torchrun identity variables a SLURM task (srun) implies, for those not already set.

    Empty outside srun (no SLURM_PROCID) and under a launcher that set RANK itself.
    """
    if not launchers.Slurm().started(environ) or "RANK" in environ:
        return {}
    return {k: v for k, v in launchers.Slurm().implied(environ).items() if k not in environ}


def adopt_slurm_identity() -> dict[str, str]:
    """Set the torchrun identity variables a SLURM task implies (only those unset); returns them.

    `adopt_launcher_identity` does this for every launcher; this one only ever reads SLURM's.
    """
    derived = slurm_identity_env(os.environ)
    os.environ.update(derived)
    return derived


def adopt_launcher_identity() -> dict[str, str]:
    """Set the torchrun identity variables this process's launcher implies (srun, mpirun; only those
    unset); returns them. `lifecycle run` calls it; code that builds a `Lifecycle` under srun or
    mpirun calls it first."""
    return launchers.adopt()


def rank_of(config: RunConfig) -> int:
    """`parallel.rank`, else the launcher's RANK, else 0."""
    if config.parallel.rank is not None:
        return config.parallel.rank
    rank = launchers.rank()
    return 0 if rank is None else rank


def world_size_of(config: RunConfig) -> int:
    """`parallel.world_size`, else the launcher's WORLD_SIZE, else 1 for a lone process; a
    ConfigError when several processes are evident but no world size is given anywhere."""
    if config.parallel.world_size is not None:
        return config.parallel.world_size
    world = launchers.world_size()
    if world is not None:
        return world
    problem = unknown_identity(os.environ)
    if problem:
        raise ConfigError(problem, field="parallel.world_size", problems=[problem])
    return 1


def unknown_identity(environ: Mapping[str, str]) -> str | None:
    """Why this process's place in the job cannot be known without WORLD_SIZE; None when it is a
    lone process."""
    return launchers.unknown_identity(environ)


def new_run_id() -> str:
    """A fresh run id (12 hex digits)."""
    return uuid.uuid4().hex[:12]


def run_id_from_env() -> str:
    """The run id every rank of one job agrees on: LIFECYCLE_RUN_ID, the launcher's (torchrun's run
    id, Open MPI's job, SLURM's job and step ids), the rendezvous address, or a fresh one for a
    single process."""
    if os.environ.get("LIFECYCLE_RUN_ID") and os.environ["LIFECYCLE_RUN_ID"] != "none":
        return os.environ["LIFECYCLE_RUN_ID"]
    return launchers.launcher_run_id() or new_run_id()
