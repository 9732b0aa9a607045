"""Who started this process, and so who it is in the job: the one place that reads launchers' variables.

Each launcher is a small identity provider (`Launcher`) that maps its own variables onto torchrun's
(`IDENTITY_VARIABLES`: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), which is what the
rest of the project, torch and Megatron-LM read. `LAUNCHERS` is the order they are asked in, the
innermost launcher first, because launchers nest:

1. `Torchrun` (RANK set): torchrun started inside an srun or mpirun step owns the identity.
2. `OpenMPI` (OMPI_COMM_WORLD_RANK set): mpirun inside a SLURM allocation starts its daemons with
   srun, so SLURM's variables there describe a daemon, not the rank.
3. `Slurm` (SLURM_PROCID set).

The first that `started` the process is the one `adopt` takes the identity from; variables already
set always win. Adding a launcher (Flux, PBS) is one `Launcher` subclass added to `LAUNCHERS` and a
test (docs/extending.md). Imports nothing of the project but `errors`; never torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from lifecycle.launchers._base import IDENTITY_VARIABLES, Launcher, port_for
from lifecycle.launchers._openmpi import OpenMPI
from lifecycle.launchers._proc import proc_stat as proc_stat
from lifecycle.launchers._slurm import Slurm
from lifecycle.launchers._slurm import expand_nodelist as expand_nodelist
from lifecycle.launchers._torchrun import LAUNCHED as LAUNCHED
from lifecycle.launchers._torchrun import Torchrun, restart_count
from lifecycle.launchers._torchrun import agent_store as agent_store
from lifecycle.launchers._torchrun import inside_torchrun as inside_torchrun
from lifecycle.launchers._torchrun import lifecycle_launched as lifecycle_launched

LAUNCHERS: tuple[Launcher, ...] = (Torchrun(), OpenMPI(), Slurm())


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def detect(environ: Mapping[str, str] | None = None) -> Launcher | None:
    """The launcher that started this process (the first of `LAUNCHERS` that did); None for a lone one."""
    env = _env(environ)
    return next((launcher for launcher in LAUNCHERS if launcher.started(env)), None)


def implied_identity(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The torchrun identity variables the launcher implies, for those not already set."""
    env = _env(environ)
    launcher = detect(env)
    derived = launcher.implied(env) if launcher is not None else {}
    return {k: v for k, v in derived.items() if k not in env}


def adopt() -> dict[str, str]:
    """Set the torchrun identity variables this process's launcher implies (only those unset) in
    `os.environ`; returns them."""
    derived = implied_identity(os.environ)
    os.environ.update(derived)
    return derived


def identity_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """torchrun's identity variables as they are set now."""
    env = _env(environ)
    return {k: env[k] for k in IDENTITY_VARIABLES if k in env}


def rank(environ: Mapping[str, str] | None = None) -> int | None:
    """RANK, when set."""
    value = _env(environ).get("RANK")
    return None if value is None else int(value)


def world_size(environ: Mapping[str, str] | None = None) -> int | None:
    """WORLD_SIZE, when set."""
    value = _env(environ).get("WORLD_SIZE")
    return None if value is None else int(value)


def local_rank(environ: Mapping[str, str] | None = None) -> int:
    """LOCAL_RANK, else 0."""
    return int(_env(environ).get("LOCAL_RANK", "0"))


def rendezvous(environ: Mapping[str, str] | None = None) -> tuple[str, int] | None:
    """(MASTER_ADDR, MASTER_PORT) when MASTER_ADDR is set (a KeyError names MASTER_PORT when only it
    is missing); None when no rendezvous is given."""
    env = _env(environ)
    if "MASTER_ADDR" not in env:
        return None
    return env["MASTER_ADDR"], int(env["MASTER_PORT"])


def unknown_identity(environ: Mapping[str, str] | None = None) -> str | None:
    """Why this process's place in the job cannot be known without WORLD_SIZE; None when it is a
    lone process."""
    env = _env(environ)
    for launcher in LAUNCHERS:
        problem = launcher.unknown(env)
        if problem:
            return problem
    # a launcher that gave its world size (1, since `unknown` said nothing) started a lone process
    evidence = [v for x in LAUNCHERS if x.size_variable not in env for v in x.evidence if v in env]
    if evidence:
        sizes = ", ".join(f"{launcher.size_variable} ({launcher.name} does)" for launcher in LAUNCHERS)
        return (
            f"{', '.join(f'{k}={env[k]}' for k in evidence)} say several processes, but no world "
            f"size is set anywhere; set {sizes} or parallel.world_size"
        )
    return None


def job_id(environ: Mapping[str, str] | None = None) -> str | None:
    """The job every rank of it is told it belongs to: LIFECYCLE_RUN_ID, else the first launcher's
    run id (torchrun's rendezvous id, Open MPI's job, SLURM's job and step); None when none says."""
    env = _env(environ)
    if env.get("LIFECYCLE_RUN_ID") and env["LIFECYCLE_RUN_ID"] != "none":
        return env["LIFECYCLE_RUN_ID"]
    return next((run_id for launcher in LAUNCHERS if (run_id := launcher.run_id(env))), None)


def launcher_run_id(environ: Mapping[str, str] | None = None) -> str | None:
    """The run id the launchers give every rank of the job (the first that gives one), else the
    rendezvous address; None for a lone process."""
    env = _env(environ)
    for launcher in LAUNCHERS:
        run_id = launcher.run_id(env)
        if run_id:
            return run_id
    if env.get("MASTER_PORT"):
        return f"{env.get('MASTER_ADDR', 'localhost')}:{env['MASTER_PORT']}"
    return None


def torchrun_env(*, rank: int, world_size: int, master_addr: str, master_port: int) -> dict[str, str]:
    """The identity variables of one local rank that this project launches itself (`run_ranks`)."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
    }


__all__ = [
    "Slurm",
    "adopt",
    "port_for",
    "rank",
    "restart_count",
    "world_size",
]
