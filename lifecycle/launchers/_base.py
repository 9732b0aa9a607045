"""What every launcher is: a small identity provider that maps its own variables onto torchrun's."""

from __future__ import annotations

import zlib
from collections.abc import Mapping

# torchrun's identity variables: what every launcher's are mapped onto, and what the rest of the
# project (and torch, and Megatron-LM) reads once they are set.
IDENTITY_VARIABLES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
# A MASTER_PORT derived from a job id: a port in [PORT_BASE, PORT_BASE + PORT_SPAN), so every task
# of one job computes the same one.
PORT_BASE, PORT_SPAN = 20000, 20000


def port_for(job: str) -> int:
    """The rendezvous port every task of job `job` derives: its number, or its CRC-32 when it is a
    name, modulo the span."""
    number = int(job) if job.isdigit() else zlib.crc32(job.encode())
    return PORT_BASE + number % PORT_SPAN


class Launcher:
    """One launcher. A subclass names its variables and says which torchrun variables they imply.

    `started` is true when this launcher started the process; `implied` is the torchrun identity it
    implies (the caller keeps whatever is already set); `run_id` is the id every rank of the job
    shares, when the launcher gives one.
    """

    name = ""  # as users call it: torchrun, srun, mpirun
    task = ""  # one process of it, as its users say: "SLURM task", "Open MPI rank"
    rank_variable = ""  # set in each process it starts: the evidence that there are several
    size_variable = ""  # where it puts the world size
    count_variable = ""  # the processes this launch started, when not `size_variable` (srun: the step's)
    evidence: tuple[str, ...] = ()  # any of them set: this process is one of several

    def started(self, environ: Mapping[str, str]) -> bool:
        return self.rank_variable in environ

    def implied(self, environ: Mapping[str, str]) -> dict[str, str]:
        raise NotImplementedError

    def run_id(self, environ: Mapping[str, str]) -> str | None:
        return None

    def launched(self, environ: Mapping[str, str]) -> int | None:
        """How many processes the launch that started this one started (its own count, which the
        one-world check holds WORLD_SIZE against), or None where it does not say."""
        value = environ.get(self.count_variable or self.size_variable, "")
        return int(value) if value.isdigit() else None

    def unknown(self, environ: Mapping[str, str]) -> str | None:
        """Why this process's place cannot be known as it stands: started by this launcher, one of
        several, but torchrun's RANK/WORLD_SIZE were never set from its variables."""
        size = environ.get(self.size_variable, "1")
        if not self.started(environ) or "RANK" in environ or (size.isdigit() and int(size) <= 1):
            return None
        return (
            f"this is {self.task} {environ[self.rank_variable]} of {size} but RANK/WORLD_SIZE are not "
            "set; call lifecycle.runtime.adopt_launcher_identity() before Lifecycle(...) (lifecycle run "
            "does), or set parallel.world_size and parallel.rank"
        )
