"""Children for test_megatron_lm_resume.py: the example script under the drop-in, trained 2 iterations
with Megatron-LM's save, then resumed from it for 2 more: as is, with two public resume bugs replayed in
its dataset provider (which runs between the load and the first step), without the optimizer's state;
and resumed with no step to train. One rank process runs the five (`megatron_lm_runs.runs`)."""

from __future__ import annotations

from typing import Any

SAVED = 2
GLOBAL_BATCH = 4  # the example script's --global-batch-size


def order(checkpoints: str) -> list[tuple[str, str, int, tuple[str, ...]]]:
    """The save, then each resume: (case, "lifecycle", TP, the script's extra arguments). `no_optim` loads
    without the optimizer's state (`--no-load-optim`, Megatron-Bridge #3832's loss); `no_step` is told to
    train to the iteration it loads, so no step comes."""
    saved = ("--save", checkpoints, "--save-interval", str(SAVED), "--train-iters", str(SAVED))
    # 2 more iterations: the scheduler's total changes with them, which Megatron-LM takes when told to
    resume = ("--load", checkpoints, "--train-iters", str(2 * SAVED), "--override-opt-param-scheduler")
    no_step = ("--load", checkpoints, "--train-iters", str(SAVED))
    return [
        ("saved", "lifecycle", 1, saved),
        ("resumed", "lifecycle", 1, resume),
        ("replayed", "lifecycle", 1, resume),
        ("no_optim", "lifecycle", 1, (*resume, "--no-load-optim")),
        ("no_step", "lifecycle", 1, no_step),
    ]


def warmup_draw() -> None:
    """Megatron-Bridge #5255: a warmup batch drawn from the restored streams before the first step."""
    import torch

    torch.randn(4)


def data_from_sample_0(args: Any) -> None:
    """Megatron-Bridge #3503 / #5987: the data starts again from sample 0 (the resume offset dropped)."""
    args.consumed_train_samples = 0


def replayed(script: Any) -> None:
    """The script's dataset provider, doing both bugs before it builds the datasets."""
    original = script.train_valid_test_datasets_provider

    def train_valid_test_datasets_provider(train_val_test_num_samples: Any) -> Any:
        from megatron.training import get_args

        warmup_draw()
        data_from_sample_0(get_args())
        return original(train_val_test_num_samples)

    train_valid_test_datasets_provider.is_distributed = True  # type: ignore[attr-defined]  # Megatron-LM's marker
    script.train_valid_test_datasets_provider = train_valid_test_datasets_provider


HOOKS = {"replayed": replayed}
"""What a case does to the script before its run (module functions: they travel to the rank process)."""
