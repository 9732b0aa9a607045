"""Who this process is in the job: rank, world size and the run id shared by all ranks.

The one place that reads the launcher's identity variables: torchrun's (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and SLURM's, which `slurm_identity_env` maps onto them
(SLURM_PROCID → RANK, SLURM_NTASKS → WORLD_SIZE, SLURM_LOCALID → LOCAL_RANK, the first host of
SLURM_JOB_NODELIST → MASTER_ADDR, a port from SLURM_JOB_ID → MASTER_PORT), never overriding what is
set. An identity that cannot be known (several processes, no world size anywhere) is refused.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping

from lifecycle.config import RunConfig
from lifecycle.errors import ConfigError

_RANGE = re.compile(r"\[([^\[\]]*)\]")
# MASTER_PORT under SLURM: a port in [PORT_BASE, PORT_BASE + PORT_SPAN) chosen by the job id, so
# every task of one job computes the same one.
PORT_BASE, PORT_SPAN = 20000, 20000


def expand_nodelist(nodelist: str) -> list[str]:
    """SLURM's compressed host list expanded: `node[01-03,07],gpu5` → node01 node02 node03 node07 gpu5."""
    hosts: list[str] = []
    depth, start = 0, 0
    for i, char in enumerate(nodelist + ","):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            if nodelist[start:i].strip():
                hosts += _expand_host(nodelist[start:i].strip(), nodelist)
            start = i + 1
    if depth != 0 or not hosts:
        raise _nodelist_error(nodelist)
    return hosts


def _expand_host(item: str, nodelist: str) -> list[str]:
    match = _RANGE.search(item)
    if match is None:
        if "[" in item or "]" in item:
            raise _nodelist_error(nodelist)
        return [item]
    head, tail, out = item[: match.start()], item[match.end() :], []
    for part in match.group(1).split(","):
        lo, dash, hi = part.strip().partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise _nodelist_error(nodelist)
        values = [str(n).zfill(len(lo)) for n in range(int(lo), int(hi) + 1)] if dash else [lo]
        for value in values:
            out += _expand_host(head + value + tail, nodelist)
    return out


def _nodelist_error(nodelist: str) -> ConfigError:
    return ConfigError(
        f"SLURM_JOB_NODELIST={nodelist!r} is not a SLURM host list such as node[01-04,07]; "
        "set MASTER_ADDR to the first node's address",
        field="SLURM_JOB_NODELIST", problems=[nodelist],
    )


def slurm_identity_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The torchrun identity variables a SLURM task (srun) implies, for those not already set.

    Empty outside srun (no SLURM_PROCID) and under a launcher that set RANK itself.
    """
    if "SLURM_PROCID" not in environ or "RANK" in environ:
        return {}
    derived = {"RANK": environ["SLURM_PROCID"]}
    for name, slurm in (("WORLD_SIZE", "SLURM_NTASKS"), ("LOCAL_RANK", "SLURM_LOCALID")):
        if slurm in environ:
            derived[name] = environ[slurm]
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if nodelist:
        derived["MASTER_ADDR"] = expand_nodelist(nodelist)[0]
    job = environ.get("SLURM_JOB_ID", "")
    if job.isdigit():
        derived["MASTER_PORT"] = str(PORT_BASE + int(job) % PORT_SPAN)
    return {k: v for k, v in derived.items() if k not in environ}


def adopt_slurm_identity() -> dict[str, str]:
    """Set the torchrun identity variables a SLURM task implies (only those unset); returns them.

    `lifecycle run` calls it; code that builds a `Lifecycle` under srun calls it first.
    """
    derived = slurm_identity_env(os.environ)
    os.environ.update(derived)
    return derived


def rank_of(config: RunConfig) -> int:
    """`parallel.rank`, else the launcher's RANK, else 0."""
    if config.parallel.rank is not None:
        return config.parallel.rank
    return int(os.environ.get("RANK", "0"))


def world_size_of(config: RunConfig) -> int:
    """`parallel.world_size`, else the launcher's WORLD_SIZE, else 1 for a lone process; a
    ConfigError when several processes are evident but no world size is given anywhere."""
    if config.parallel.world_size is not None:
        return config.parallel.world_size
    if "WORLD_SIZE" in os.environ:
        return int(os.environ["WORLD_SIZE"])
    problem = unknown_identity(os.environ)
    if problem:
        raise ConfigError(problem, field="parallel.world_size", problems=[problem])
    return 1


def unknown_identity(environ: Mapping[str, str]) -> str | None:
    """Why this process's place in the job cannot be known without WORLD_SIZE; None when it is a
    lone process."""
    ntasks = environ.get("SLURM_NTASKS", "1")
    if "SLURM_PROCID" in environ and "RANK" not in environ and (not ntasks.isdigit() or int(ntasks) > 1):
        return (f"this is SLURM task {environ['SLURM_PROCID']} of {ntasks} but RANK/WORLD_SIZE are not "
                "set; call lifecycle.runtime.adopt_slurm_identity() before Lifecycle(...) (lifecycle run "
                "does), or set parallel.world_size and parallel.rank")
    launched = [k for k in ("RANK", "LOCAL_RANK", "SLURM_PROCID") if k in environ]
    if launched:
        return (f"{', '.join(f'{k}={environ[k]}' for k in launched)} say several processes, but no world "
                "size is set anywhere; set WORLD_SIZE (torchrun does), SLURM_NTASKS (srun does) or "
                "parallel.world_size")
    return None


def new_run_id() -> str:
    """A fresh run id (12 hex digits)."""
    return uuid.uuid4().hex[:12]


def run_id_from_env() -> str:
    """The run id every rank of one job agrees on: LIFECYCLE_RUN_ID, torchrun's run id, SLURM's job
    and step ids, the rendezvous address, or a fresh one for a single process."""
    for name in ("LIFECYCLE_RUN_ID", "TORCHELASTIC_RUN_ID"):
        if os.environ.get(name) and os.environ[name] != "none":
            return os.environ[name]
    if os.environ.get("SLURM_JOB_ID") and "SLURM_PROCID" in os.environ:
        return f"slurm-{os.environ['SLURM_JOB_ID']}.{os.environ.get('SLURM_STEP_ID', '0')}"
    if os.environ.get("MASTER_PORT"):
        return f"{os.environ.get('MASTER_ADDR', 'localhost')}:{os.environ['MASTER_PORT']}"
    return new_run_id()
