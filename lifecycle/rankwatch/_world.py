"""One world: at check-in every rank agrees through the store on the job it belongs to and its size.

Two jobs that share a rendezvous endpoint (the same MASTER_ADDR:MASTER_PORT, or torchrun's agent
store), or ranks launched with different WORLD_SIZEs, otherwise meet in one store and wait there
until `startup.timeout_s`, or worse, form a world together. Each rank's first check-in operation is
`compare_set("world", "", its fingerprint)`: the first rank's fingerprint stays, and a rank whose job
or world size differs fails at once, naming both worlds. It also writes the conflict into the
check-in's gate (`all_arrived`), so the ranks of the first world, waiting there, wake and fail at
once too, naming both. Cost: 1 store operation a rank (2 for a rank that finds a conflict) and the
gate's read after the wait, 1 a rank: 2N at N ranks, once per initialization.

What is compared is the job (the launcher's run id: `LIFECYCLE_RUN_ID`, torchrun's rendezvous id,
SLURM's job and step, Open MPI's job; unnamed when none gives one) and the world size. The endpoint
and the generation name the worlds in the message; they are equal by construction for ranks that
met in one store's key space.

A job whose nodes each formed a world of their own never meets in one store. `scheduler_split`
catches that from the launcher's own counts: torchrun under an srun step of several nodes whose
rendezvous holds a single node (each node ran `--standalone`), or a launcher that started every rank
itself and counts a different number of them than WORLD_SIZE.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from lifecycle import launchers
from lifecycle.errors import DistributedError

if TYPE_CHECKING:
    from torch.distributed import Store

CONFLICT = b"conflict:"
"""The check-in gate (`all_arrived`) holds `1` once every rank arrived, or this and both worlds."""
FIX = (
    "give each job its own MASTER_PORT (or torchrun --rdzv-id and endpoint), and every rank of one job "
    "the same WORLD_SIZE."
)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class World:
    """What one rank believes its world is. `job` and `world_size` must agree; the rest names it."""

    job: str | None
    world_size: int
    endpoint: str
    generation: int
    rank: int

    def same_world(self, other: World) -> bool:
        return (self.job, self.world_size) == (other.job, other.world_size)

    def encode(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> World:
        data = json.loads(raw)
        return cls(
            job=None if data.get("job") is None else str(data["job"]),
            world_size=int(data["world_size"]),
            endpoint=str(data.get("endpoint", "?")),
            generation=int(data.get("generation", 0)),
            rank=int(data.get("rank", -1)),
        )

    def describe(self) -> str:
        job = f"job {self.job!r}" if self.job else "an unnamed job"
        return f"{job} of {self.world_size} ranks (as rank {self.rank} sees it, generation {self.generation})"


def agree(store: Store, mine: World) -> None:
    """This rank's fingerprint against the first one written: raise at once (after telling the
    waiting ranks through the gate) when the worlds differ."""
    first = bytes(store.compare_set("world", b"", mine.encode()))
    theirs = World.decode(first)
    if first == mine.encode() or mine.same_world(theirs):
        return
    both = json.dumps({"first": first.decode(), "other": mine.encode().decode()})
    store.compare_set("all_arrived", b"", CONFLICT + both.encode())
    raise conflict(mine, theirs, first=theirs)


def gate(store: Store, mine: World) -> None:
    """After the wait: the gate is open, or it holds a conflict that a rank of another world wrote."""
    value = bytes(store.get("all_arrived"))
    if not value.startswith(CONFLICT):
        return
    data = json.loads(value[len(CONFLICT) :])
    first, other = World.decode(data["first"].encode()), World.decode(data["other"].encode())
    raise conflict(mine, other if mine.same_world(first) else first, first=first)


def conflict(mine: World, theirs: World, *, first: World) -> DistributedError:
    """The error every rank of both worlds raises: both named, and who checked in first."""
    return DistributedError(
        f"two worlds met at the rendezvous {mine.endpoint}: this rank {mine.rank} is in {mine.describe()}, "
        f"another is in {theirs.describe()} (rank {first.rank} checked in first). Every rank stops at once; {FIX}",
        field="parallel.world_size",
        worlds=[mine.describe(), theirs.describe()],
    )


def checked(rank: int, world_size: int, generation: int, environ: Mapping[str, str] | None = None) -> World:
    """This rank's world as its launcher describes it; a `DistributedError` when the launcher's own
    counts say it is not the whole job (`scheduler_split`)."""
    env = os.environ if environ is None else environ
    split = scheduler_split(env, world_size)
    if split is not None:
        raise DistributedError(split, field="parallel.world_size")
    where = launchers.rendezvous(env)
    endpoint = "{}:{}".format(*where) if where is not None else "the provided store"
    return World(job=launchers.job_id(env), world_size=world_size, endpoint=endpoint, generation=generation, rank=rank)


def scheduler_split(environ: Mapping[str, str], world_size: int) -> str | None:
    """Why the launcher's own counts say this world is not the whole job, or None."""
    step_nodes = _int(environ, "SLURM_STEP_NUM_NODES") or _int(environ, "SLURM_NNODES")
    group = _int(environ, "GROUP_WORLD_SIZE")  # torchrun: the nodes (agents) in its rendezvous
    if group == 1 and step_nodes is not None and step_nodes > 1 and "TORCHELASTIC_RUN_ID" in environ:
        return (
            f"torchrun's rendezvous holds 1 node (GROUP_WORLD_SIZE=1, WORLD_SIZE={world_size}) but the srun "
            f"step runs on {step_nodes} nodes (SLURM_STEP_NUM_NODES): each node formed a world of its own. "
            "Give every node's torchrun the same --rdzv-endpoint and --nnodes, not --standalone"
        )
    for launcher in launchers.LAUNCHERS:  # each launcher that started this rank: its own count
        if launcher.size_variable == "WORLD_SIZE" or "TORCHELASTIC_RUN_ID" in environ:
            continue  # torchrun's count is WORLD_SIZE itself
        declared = launcher.launched(environ)
        if declared is None or environ.get(launcher.rank_variable) != environ.get("RANK"):
            continue
        if declared != world_size:
            variable = launcher.count_variable or launcher.size_variable
            return (
                f"the launcher started {declared} ranks ({variable}={declared}) but WORLD_SIZE is {world_size}: "
                "the ranks would form worlds that never meet, or wait for ranks that never come. Leave WORLD_SIZE "
                "unset (the lifecycle takes it from the launcher), or set it to the launcher's count"
            )
    return None


def _int(environ: Mapping[str, str], name: str) -> int | None:
    value = environ.get(name, "")
    return int(value) if value.isdigit() else None
