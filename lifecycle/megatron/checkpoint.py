"""Checkpoints with megatron's `dist_checkpointing` (model and optimizer, sharded across ranks).

Layout, as Megatron-LM writes it: `DIR/iter_0000003/` (one dist checkpoint: the model's and the
optimizer's sharded state dicts, and common state: the step and the padded vocab size) and
`DIR/latest_checkpointed_iteration.txt` holding the latest step, written by rank 0 once every rank
has saved. MODEL_BUILT loads; `lifecycle run` saves after its steps; `restart()` resumes from the
latest checkpoint under `checkpoint.save` when there is one.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lifecycle.errors import ConfigError
from lifecycle.log import events

if TYPE_CHECKING:
    from lifecycle.config import RunConfig
    from lifecycle.megatron.steps import Driver
    from lifecycle.runtime import PhaseContext

LATEST = "latest_checkpointed_iteration.txt"


def iteration_dir(directory: str | Path, step: int) -> Path:
    return Path(directory) / f"iter_{step:07d}"


def latest_step(directory: str | Path | None) -> int | None:
    """The latest complete step saved under `directory`; None when there is none."""
    if not directory:
        return None
    marker = Path(directory) / LATEST
    try:
        text = marker.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def checkpoint_vocab_size(directory: str | None) -> int | None:
    """The padded vocab size a checkpoint was saved with (its common state); None without one."""
    step = latest_step(directory)
    if directory is None or step is None:
        return None
    from megatron.core import dist_checkpointing

    try:
        common = dist_checkpointing.load_common_state_dict(str(iteration_dir(directory, step)))
    except Exception:  # a corrupt checkpoint is reported, with its reason, where it is loaded
        return None
    value = common.get("vocab_size") if isinstance(common, dict) else None
    return int(value) if isinstance(value, int) else None


def _sharded(model: list[Any], optimizer: Any, *, loading: bool) -> dict[str, Any]:
    """Sharded state dicts of the unwrapped chunks (no DDP `module.` prefix) and the optimizer."""
    from megatron.core.utils import unwrap_model

    chunks = unwrap_model(list(model))
    state: dict[str, Any] = {f"model{i}": chunk.sharded_state_dict() for i, chunk in enumerate(chunks)}
    if optimizer is not None:
        state["optimizer"] = optimizer.sharded_state_dict(dict(state), is_loading=loading)
    return state


def save_checkpoint(directory: str, step: int, model: list[Any], optimizer: Any, vocab_size: int | None) -> Path:
    """Save model and optimizer at `step` (a collective: every rank calls it); returns the path."""
    import torch.distributed as dist
    from megatron.core import dist_checkpointing

    path = iteration_dir(directory, step)
    if dist.get_rank() == 0:
        path.mkdir(parents=True, exist_ok=True)
    dist.barrier()
    state = _sharded(model, optimizer, loading=False)
    state["step"] = step
    state["vocab_size"] = vocab_size
    dist_checkpointing.save(state, str(path))
    dist.barrier()
    if dist.get_rank() == 0:
        (Path(directory) / LATEST).write_text(f"{step}\n")
    dist.barrier()
    return path


def load_checkpoint(directory: str, field: str, model: list[Any], optimizer: Any) -> int:
    """Load the latest checkpoint under `directory` into `model` (and `optimizer`); its step.

    A ConfigError naming `field` when there is no complete checkpoint or it cannot be read."""
    from megatron.core import dist_checkpointing
    from torch.distributed.checkpoint.api import CheckpointException

    step = latest_step(directory)
    if step is None:
        raise ConfigError(
            f"{field}={directory!r} holds no complete checkpoint ({LATEST} is missing or not a step); "
            f"point {field} at a directory `lifecycle run` saved to, or remove it",
            field=field, problems=[directory],
        )
    path = iteration_dir(directory, step)
    try:
        loaded = dist_checkpointing.load(_sharded(model, optimizer, loading=True), str(path))
    except (Exception, CheckpointException) as exc:  # CheckpointException: a BaseException, raised on every rank
        raise ConfigError(
            f"{field}={directory!r}: {path.name} cannot be loaded ({_reason(exc)}); "
            f"the checkpoint is corrupt or was saved for another model or parallel layout; point {field} "
            "at a complete checkpoint of this model, or remove it",
            field=field, problems=[str(path)],
        ) from exc
    from megatron.core.utils import unwrap_model

    for index, chunk in enumerate(unwrap_model(list(model))):
        chunk.load_state_dict(loaded[f"model{index}"])
    if optimizer is not None and "optimizer" in loaded:
        optimizer.load_state_dict(loaded["optimizer"])
    return step


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
    count = os.environ.get("TORCHELASTIC_RESTART_COUNT", "")
    return count.isdigit() and int(count) > 0


def load_at_build(ctx: PhaseContext, model: list[Any], optimizer: Any) -> int:
    """MODEL_BUILT's load: the step the loaded checkpoint was saved at (0 for fresh weights)."""
    source = checkpoint_source(ctx.runtime.config, ctx.runtime.generation)
    if source is None:
        return 0
    directory, field = source
    started = time.perf_counter()
    step = load_checkpoint(directory, field, model, optimizer)
    ctx.emit(events.CHECKPOINT_LOADED, path=str(iteration_dir(directory, step)), step=step, source=field,
             optimizer=optimizer is not None, duration_s=time.perf_counter() - started)
    return step


def save_after_steps(lc: Driver, step: int) -> Path | None:
    """Save to `checkpoint.save` at `step` when the config asks for it (every rank calls it)."""
    rt = lc.runtime
    directory = rt.config.checkpoint.save
    if not directory or rt.model is None:
        return None
    from lifecycle.megatron.steps import steps_for

    steps_for(lc).sync_params("before_checkpoint_save")  # the shards this rank does not own are current
    started = time.perf_counter()
    path = save_checkpoint(directory, step, list(rt.model), rt.optimizer, rt.vocab_size)
    lc.record(events.CHECKPOINT_SAVED, path=str(path), step=step, duration_s=time.perf_counter() - started)
    return path


def _reason(exc: BaseException) -> str:
    """The first line of the error, and for torch's per-rank CheckpointException the ranks that failed."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict):
        kinds = sorted({type(f[0] if isinstance(f, tuple) else f).__name__ for f in failures.values()})
        return f"{type(exc).__name__} on ranks {sorted(failures)}: {', '.join(kinds)}"
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
