"""Checkpoints with megatron's `dist_checkpointing` (model and optimizer, sharded across ranks).

Layout, as Megatron-LM writes it (`lifecycle.config`'s checkpoint layout): `DIR/iter_0000003/`
(one dist checkpoint: the model's and the optimizer's sharded state dicts, and common state: the
step and the padded vocab size) and `DIR/latest_checkpointed_iteration.txt` holding the latest step.
A save is atomic: every rank writes under `DIR/.iter_0000003.partial/`, and once all have finished
rank 0 renames it to `iter_0000003/`, then replaces the marker, so a failed save never leaves an
`iter_*` directory or a marker that looks complete. MODEL_BUILT loads; `lifecycle run` saves after
its steps; `restart()` resumes from the latest checkpoint under `checkpoint.save` when there is one.

The distributed optimizer's state is asked for with the sharding type Megatron-LM uses,
`dp_reshardable` (its `_build_sharded_state_dict_metadata`): megatron-core's default for a bare
call, `fully_sharded_model_space`, produces flattened shards that `dist_checkpointing`'s torch
strategy refuses (`ShardedTensor.flattened_range is not supported`). That path needs Apex's or
Transformer Engine's Adam: with torch's Adam (megatron-core's fallback without them, as in the CPU
rehearsal) megatron-core's checkpoint code fails on the per-parameter `step` in every sharding type,
so VALIDATED refuses that combination (`distributed_optimizer_checkpoints`) and `scripts/gpu-check`
runs it where Transformer Engine exists.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from lifecycle.config import LATEST, iteration_dir, latest_step, partial_dir
from lifecycle.errors import ConfigError
from lifecycle.launchers import restart_count
from lifecycle.log import JSONValue, records
from lifecycle.resume._counts import optimizer_counts, saved_counts
from lifecycle.resume.streams import StreamStates, capture, restore

if TYPE_CHECKING:
    from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedStateDict
    from megatron.core.optimizer import MegatronOptimizer
    from megatron.core.transformer.module import MegatronModule

    from lifecycle.config import RunConfig
    from lifecycle.runtime import PhaseContext

    Retarget = Callable[[Path, str, list[MegatronModule], ShardedStateDict], str | None]

OPTIMIZER_SHARDING = "dp_reshardable"


def _read_errors() -> tuple[type[BaseException], ...]:
    """What a damaged checkpoint raises: torch's CheckpointException is a BaseException, raised on
    every rank; pickle and decoding errors are plain exceptions."""
    from torch.distributed.checkpoint.api import CheckpointException

    return (Exception, CheckpointException)


def _common(directory: str | None) -> dict[str, JSONValue]:
    """The latest checkpoint's common state (rank 0's non-sharded items); {} without one."""
    step = latest_step(directory)
    if directory is None or step is None:
        return {}
    return common_state(iteration_dir(directory, step))


def common_state(path: Path) -> dict[str, JSONValue]:
    """The common state (rank 0's non-sharded items) of the dist checkpoint at `path`, an `iter_`
    directory; {} where there is none to read (no checkpoint, another format, a damaged one)."""
    from megatron.core import dist_checkpointing

    try:
        common = dist_checkpointing.load_common_state_dict(str(path))
    except _read_errors():  # a corrupt checkpoint is reported, with its reason, where it is loaded
        return {}
    return common if isinstance(common, dict) else {}


def checkpoint_vocab_size(directory: str | None) -> int | None:
    """The padded vocab size a checkpoint was saved with (its common state); None without one."""
    value = _common(directory).get("vocab_size")
    return int(value) if isinstance(value, int) else None


def _streams_saved(directory: str) -> bool:
    """Whether the latest checkpoint holds every rank's random streams for a world of this size."""
    import torch.distributed as dist

    return bool(_common(directory).get("rng_world_size") == dist.get_world_size())


def saved_optimizer_counts(directory: str | None) -> dict[str, JSONValue] | None:
    """The optimizer's step counts and loss scale the latest checkpoint was saved with
    (`streams.optimizer_counts`); None for a checkpoint saved without them."""
    value = _common(directory).get("optimizer_counts")
    return value if isinstance(value, dict) else None


def megatron_lm_optimizer_counts(path: Path, iteration: int) -> dict[str, JSONValue] | None:
    """The optimizer counts (`_counts.optimizer_counts`' shape) the Megatron-LM checkpoint at `path`, an
    `iter_` directory, was saved with: read from the optimizer state its common state keeps
    (`_counts.saved_counts`). None where it is not the checkpoint of `iteration`, holds no optimizer state
    (`--no-save-optim`) or has no common state to read (Megatron-LM's legacy `torch` format)."""
    common = common_state(path)
    if common.get("iteration") != iteration or "optimizer" not in common:
        return None
    scale = getattr(common.get("args"), "loss_scale", None)  # a constant grad scaler's, which saves no state
    return saved_counts(common["optimizer"], float(scale) if isinstance(scale, int | float) else None)


def _metadata() -> dict[str, JSONValue]:
    """The sharded-state-dict metadata Megatron-LM passes (`_build_sharded_state_dict_metadata`)."""
    from megatron.core import parallel_state

    return {
        "distrib_optim_sharding_type": OPTIMIZER_SHARDING,
        "singleton_local_shards": False,
        "chained_optim_avoid_prefix": True,
        "dp_cp_group": parallel_state.get_data_parallel_group(with_context_parallel=True),
    }


def _sharded(model: list[MegatronModule], optimizer: MegatronOptimizer | None, *, loading: bool) -> ShardedStateDict:
    """Sharded state dicts of the unwrapped chunks (no DDP `module.` prefix) and the optimizer."""
    from megatron.core.utils import unwrap_model

    metadata = _metadata()
    chunks = unwrap_model(list(model))
    state: ShardedStateDict = {
        f"model{i}": chunk.sharded_state_dict(metadata=metadata) for i, chunk in enumerate(chunks)
    }
    if optimizer is not None:
        state["optimizer"] = optimizer.sharded_state_dict(dict(state), is_loading=loading, metadata=metadata)
    return state


def _rng_object(data: StreamStates | None) -> ShardedObject:
    """This rank's random streams as one shard of `rng_state`, one shard per rank (a world of another
    size does not load them: `_load`)."""
    import torch.distributed as dist
    from megatron.core.dist_checkpointing.mapping import ShardedObject

    return ShardedObject("lifecycle_rng_state", data, (dist.get_world_size(),), (dist.get_rank(),), replica_id=0)


def save_checkpoint(
    directory: str, step: int, model: list[MegatronModule], optimizer: MegatronOptimizer | None, vocab_size: int | None
) -> Path:
    """Save model and optimizer at `step` (a collective: every rank calls it); returns the path.

    Written under `partial_dir`, renamed into place by rank 0 once every rank has finished; the
    marker is replaced last. A failed save removes its partial directory (rank 0) and raises."""
    import torch.distributed as dist
    from megatron.core import dist_checkpointing

    final, partial = iteration_dir(directory, step), partial_dir(directory, step)
    rank0 = dist.get_rank() == 0
    if rank0:
        shutil.rmtree(partial, ignore_errors=True)  # an earlier save of this step that failed
        partial.mkdir(parents=True)
    dist.barrier()
    try:
        state = _sharded(model, optimizer, loading=False)
        state["step"] = step
        state["vocab_size"] = vocab_size
        state["optimizer_counts"] = optimizer_counts(optimizer) if optimizer is not None else None
        state["rng_world_size"] = dist.get_world_size()
        state["lifecycle_rng_state"] = _rng_object(capture())
        dist_checkpointing.save(state, str(partial))
        dist.barrier()
    except BaseException:
        if rank0:
            shutil.rmtree(partial, ignore_errors=True)
        raise
    finally:
        release_write_queue()
    if rank0:
        publish_save(Path(directory), partial, final, step)
    dist.barrier()
    return final


def release_write_queue() -> None:
    """Shut down the process megatron's checkpoint writer keeps after a save. Its results queue
    (`dist_checkpointing/strategies/filesystem_async.py`) is served by a spawned `multiprocessing`
    Manager that lives as long as the rank; a rank killed later (SIGKILL, a launcher's restart) leaves
    it orphaned, holding the launcher's output pipes open, so the launcher never returns. The next
    save makes a new one."""
    try:
        from megatron.core.dist_checkpointing.strategies import filesystem_async
    except ImportError:  # pragma: no cover - megatron-core is a dependency
        return
    queue = getattr(filesystem_async, "_results_queue", None)
    if queue is None:
        return
    filesystem_async._results_queue = None
    manager = getattr(queue, "_manager", None)
    if manager is not None:
        manager.shutdown()


def publish_save(directory: Path, partial: Path, final: Path, step: int) -> None:
    """Publish a save of `step` that every rank finished writing into `partial`: rename it into place
    as `final` (a save of the same step already there moves aside first, then goes), then point the
    `latest` marker under `directory` at it. Each step is atomic, so a reader (a restart, another job)
    sees the previous complete checkpoint or this one, never a half-written save."""
    if final.exists():  # saving a step again: the old copy moves aside first, then goes
        old = directory / f".{final.name}.old"
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
        partial.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        partial.rename(final)
    marker = directory / f".{LATEST}.partial"
    marker.write_text(f"{step}\n")
    os.replace(marker, directory / LATEST)


def _apply(
    loaded: ShardedStateDict, model: list[MegatronModule], optimizer: MegatronOptimizer | None, *, streams: bool
) -> None:
    """What `dist_checkpointing.load` read, put into the chunks, the optimizer and (`streams`) this
    rank's random streams."""
    from megatron.core.utils import unwrap_model

    if streams:
        restore(loaded["lifecycle_rng_state"])
    for index, chunk in enumerate(unwrap_model(list(model))):
        chunk.load_state_dict(loaded[f"model{index}"])
    if optimizer is not None and "optimizer" in loaded:
        optimizer.load_state_dict(loaded["optimizer"])


def _load(
    directory: str, field: str, model: list[MegatronModule], optimizer: MegatronOptimizer | None, retarget: Retarget
) -> tuple[int, str | None, bool]:
    """Load the latest checkpoint under `directory`: its step, the model class that saved it when
    `retarget` translated it for this one (else None), and whether the random streams were restored
    (saved, by this version, for a world of this size). A ConfigError naming `field` and the file
    when there is no complete checkpoint or it cannot be read."""
    from megatron.core import dist_checkpointing

    step = latest_step(directory)
    if step is None:
        raise ConfigError(
            f"{field}={directory!r} holds no complete checkpoint ({LATEST} is missing or not a step); "
            f"point {field} at a directory `lifecycle run` saved to, or remove it",
            field=field,
            problems=[directory],
        )
    path = iteration_dir(directory, step)
    state = _sharded(model, optimizer, loading=True)
    retargeted = retarget(path, field, model, state)
    streams = _streams_saved(directory)
    if streams:
        state["lifecycle_rng_state"] = _rng_object(None)
    try:
        _apply(dist_checkpointing.load(state, str(path)), model, optimizer, streams=streams)
    except _read_errors() as exc:
        damaged = damaged_file(path)
        where = f"{path.name}/{damaged.name}" if damaged else path.name
        raise ConfigError(
            f"{field}={directory!r}: {path.name} cannot be loaded ({where}: {load_failure_reason(exc, path)}); "
            f"the checkpoint is corrupt or was saved for another model or parallel layout; point {field} "
            "at a complete checkpoint of this model, or remove it",
            field=field,
            problems=[str(path)],
        ) from exc
    return step, retargeted, streams


def checkpoint_source(run: RunConfig, generation: int) -> tuple[str, str] | None:
    """(directory, field) MODEL_BUILT loads from: after a restart, the latest checkpoint this run
    saved (`checkpoint.save`) when there is one (also in a process torchrun restarted); else
    `checkpoint.load`; None for fresh weights."""
    save = run.checkpoint.save
    if (generation > 0 or _process_restart()) and save and latest_step(save) is not None:
        return save, "checkpoint.save"
    if run.checkpoint.load:
        return run.checkpoint.load, "checkpoint.load"
    return None


def _process_restart() -> bool:
    """This process is a torchrun restart (`--max-restarts`) of the job: resume like a restart."""
    return (restart_count() or 0) > 0


def load_at_build(
    ctx: PhaseContext, model: list[MegatronModule], optimizer: MegatronOptimizer | None, *, retarget: Retarget
) -> int:
    """MODEL_BUILT's load: the step the loaded checkpoint was saved at (0 for fresh weights).
    `retarget` reads a checkpoint of another model class into this one (`core_entry._interop`'s)."""
    source = checkpoint_source(ctx.runtime.config, ctx.runtime.generation)
    if source is None:
        return 0
    directory, field = source
    started = time.perf_counter()
    step, retargeted, streams = _load(directory, field, model, optimizer, retarget)
    ctx.emit(
        records.CheckpointLoaded(
            path=str(iteration_dir(directory, step)),
            step=step,
            source=field,
            optimizer=optimizer is not None,
            streams=streams,
            duration_s=time.perf_counter() - started,
            retargeted_from=retargeted if retargeted else records.UNSET,
        )
    )
    return step


def damaged_file(path: Path) -> Path | None:
    """Which file of the checkpoint at `path` (an iteration directory) to blame when it cannot be
    loaded: the first of its index files that cannot be read back (metadata.json as JSON,
    torch's `.metadata` and `common.pt` as pickles); None when they all read (the shards are then
    the damaged part, and the error names them when it can)."""
    import json
    import pickle

    import torch

    readers: tuple[tuple[str, Callable[[Path], object]], ...] = (
        ("metadata.json", lambda f: json.loads(f.read_text(encoding="utf-8"))),
        (".metadata", lambda f: pickle.loads(f.read_bytes())),
        ("common.pt", lambda f: torch.load(f, map_location="cpu", weights_only=False)),
    )
    for name, read in readers:
        candidate = path / name
        if not candidate.is_file():
            continue
        try:
            read(candidate)
        except Exception:
            return candidate
    return None


def load_failure_reason(exc: BaseException, path: Path) -> str:
    """Why the checkpoint at `path` could not be loaded, in one line for the ConfigError a refused
    load raises: the error's type and the first line of its message (at most 300 characters), the
    file it names when it names one under `path`, and for torch's per-rank CheckpointException the
    ranks that failed."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict):
        kinds = sorted({type(f[0] if isinstance(f, tuple) else f).__name__ for f in failures.values()})
        return f"{type(exc).__name__} on ranks {sorted(failures)}: {', '.join(kinds)}"
    where = getattr(exc, "filename", None)
    named = f" in {where}" if isinstance(where, str) and where.startswith(str(path)) else ""
    return f"{type(exc).__name__}{named}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
