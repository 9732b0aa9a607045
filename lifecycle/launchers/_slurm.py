"""SLURM's srun: SLURM_PROCID → RANK, SLURM_NTASKS → WORLD_SIZE, SLURM_LOCALID → LOCAL_RANK, the first
host of SLURM_JOB_NODELIST → MASTER_ADDR, a port from SLURM_JOB_ID → MASTER_PORT."""

from __future__ import annotations

import re
from collections.abc import Mapping

from lifecycle.errors import ConfigError
from lifecycle.launchers._base import Launcher, port_for

_RANGE = re.compile(r"\[([^\[\]]*)\]")


class Slurm(Launcher):
    name, task, rank_variable, size_variable = "srun", "SLURM task", "SLURM_PROCID", "SLURM_NTASKS"
    count_variable = "SLURM_STEP_NUM_TASKS"  # this srun step's tasks (SLURM_NTASKS: the allocation's)
    evidence = ("SLURM_PROCID",)

    def implied(self, environ: Mapping[str, str]) -> dict[str, str]:
        derived = {"RANK": environ["SLURM_PROCID"]}
        for name, slurm in (("WORLD_SIZE", "SLURM_NTASKS"), ("LOCAL_RANK", "SLURM_LOCALID")):
            if slurm in environ:
                derived[name] = environ[slurm]
        nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
        if nodelist:
            derived["MASTER_ADDR"] = expand_nodelist(nodelist)[0]
        job = environ.get("SLURM_JOB_ID", "")
        if job.isdigit():
            derived["MASTER_PORT"] = str(port_for(job))
        return derived

    def run_id(self, environ: Mapping[str, str]) -> str | None:
        if environ.get("SLURM_JOB_ID") and "SLURM_PROCID" in environ:
            return f"slurm-{environ['SLURM_JOB_ID']}.{environ.get('SLURM_STEP_ID', '0')}"
        return None


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
        field="SLURM_JOB_NODELIST",
        problems=[nodelist],
    )
