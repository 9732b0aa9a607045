"""The checkpoint directory's layout, as Megatron-LM writes it (pure: paths and small files only).

`DIR/iter_0000003/` is one complete dist checkpoint (its `metadata.json` is written last by
megatron's `dist_checkpointing`); `DIR/latest_checkpointed_iteration.txt` names the latest complete
step. A save in progress lives under a hidden name (`.iter_0000003.partial`) and is renamed into
place once every rank has written its part, so an `iter_*` directory is always complete.
VALIDATED reads this to refuse a `checkpoint.load` that holds no checkpoint before any side effect;
MODEL_BUILT loads from it.
"""

from __future__ import annotations

from pathlib import Path

LATEST = "latest_checkpointed_iteration.txt"
COMPLETE_MARKER = "metadata.json"


def iteration_dir(directory: str | Path, step: int) -> Path:
    return Path(directory) / f"iter_{step:07d}"


def partial_dir(directory: str | Path, step: int) -> Path:
    """Where a save of `step` is written before it is complete (never matches `iter_*`)."""
    return Path(directory) / f".iter_{step:07d}.partial"


def latest_step(directory: str | Path | None) -> int | None:
    """The latest complete step saved under `directory`; None when there is none."""
    if not directory:
        return None
    try:
        text = (Path(directory) / LATEST).read_text(encoding="ascii", errors="replace").strip()
    except (OSError, ValueError):
        return None
    return int(text) if text.isdigit() and len(text) <= 12 else None


def checkpoint_problem(directory: str) -> str | None:
    """Why `directory` holds no loadable checkpoint (None when it looks like one)."""
    path = Path(directory)
    if not path.exists():
        return "does not exist"
    if not path.is_dir():
        return "is not a directory"
    step = latest_step(path)
    if step is None:
        return f"holds no checkpoint ({LATEST} is missing or does not name a step)"
    if not (iteration_dir(path, step) / COMPLETE_MARKER).is_file():
        return f"{LATEST} names step {step}, but {iteration_dir(path, step).name}/ is missing or incomplete"
    return None
