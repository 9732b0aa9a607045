"""Open MPI's mpirun (4.x and 5.x): OMPI_COMM_WORLD_RANK → RANK, OMPI_COMM_WORLD_SIZE → WORLD_SIZE,
OMPI_COMM_WORLD_LOCAL_RANK → LOCAL_RANK.

Open MPI names no rendezvous host, so MASTER_ADDR is 127.0.0.1 when every rank runs on this node
(OMPI_COMM_WORLD_LOCAL_SIZE equals the world size) and must be given otherwise
(`mpirun -x MASTER_ADDR=node0`). MASTER_PORT comes from the job id every rank of one mpirun sees
(OMPI_MCA_ess_base_jobid in 4.x, PMIX_NAMESPACE in 5.x), as SLURM's does.
"""

from __future__ import annotations

from collections.abc import Mapping

from lifecycle.launchers._base import Launcher, port_for


class OpenMPI(Launcher):
    name, task, rank_variable, size_variable = "mpirun", "Open MPI rank", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"
    evidence = ("OMPI_COMM_WORLD_RANK",)

    def implied(self, environ: Mapping[str, str]) -> dict[str, str]:
        derived = {"RANK": environ["OMPI_COMM_WORLD_RANK"]}
        for name, ompi in (("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"), ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK")):
            if ompi in environ:
                derived[name] = environ[ompi]
        size = environ.get("OMPI_COMM_WORLD_SIZE")
        if size is not None and environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") == size:
            derived["MASTER_ADDR"] = "127.0.0.1"
        job = _job(environ)
        if job:
            derived["MASTER_PORT"] = str(port_for(job))
        return derived

    def run_id(self, environ: Mapping[str, str]) -> str | None:
        job = _job(environ) if self.started(environ) else None
        return f"ompi-{job}" if job else None


def _job(environ: Mapping[str, str]) -> str | None:
    return environ.get("OMPI_MCA_ess_base_jobid") or environ.get("PMIX_NAMESPACE") or None
