"""What the engine and the phases share: the `Runtime` record, the phase protocol, typed engine
`Options`, and the process's identity in the job. Imports neither torch nor megatron."""

from __future__ import annotations

from lifecycle.launchers import expand_nodelist  # SLURM's host lists, where users found them first
from lifecycle.runtime._identity import (
    adopt_launcher_identity,
    adopt_slurm_identity,
    new_run_id,
    rank_of,
    run_id_from_env,
    slurm_identity_env,
    unknown_identity,
    world_size_of,
)
from lifecycle.runtime._phases import Around, Entry, Phase, Phases, PhaseSet, Work
from lifecycle.runtime._protocol import (
    Closeable,
    Imports,
    ModelChunk,
    Optimizer,
    Options,
    PhaseContext,
    ResumeCheck,
    Runtime,
    Slot,
    Tokenizer,
    Watch,
)
from lifecycle.runtime._providers import (
    BuildsModel,
    ConfiguresModel,
    GivenProvider,
    ModelInputs,
    ModelProvider,
    ProvidesModel,
)

__all__ = [
    "Around",
    "BuildsModel",
    "Closeable",
    "ConfiguresModel",
    "Entry",
    "GivenProvider",
    "Imports",
    "ModelChunk",
    "ModelInputs",
    "ModelProvider",
    "Optimizer",
    "Options",
    "Phase",
    "PhaseContext",
    "PhaseSet",
    "Phases",
    "ProvidesModel",
    "ResumeCheck",
    "Runtime",
    "Slot",
    "Tokenizer",
    "Watch",
    "Work",
    "adopt_launcher_identity",
    "adopt_slurm_identity",
    "expand_nodelist",
    "new_run_id",
    "rank_of",
    "run_id_from_env",
    "slurm_identity_env",
    "unknown_identity",
    "world_size_of",
]
