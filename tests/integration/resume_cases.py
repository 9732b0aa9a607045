"""Replays of the public "a resume is not the uninterrupted run" bugs, each a small CPU hook doing what
the bug did between the checkpoint load and the first step, run through a real lifecycle on one rank
(test_resume_window.py): a save at step 2, then a resume per case, and what the log and the audit say.
"""

from __future__ import annotations

import json
import random
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from lifecycle import Lifecycle, RunConfig
from lifecycle.audit import audit
from states import State

TINY = ["model.num_layers=2", "model.hidden_size=32", "model.num_attention_heads=4", "model.seq_length=16"]
SAVED = 2


def warmup_5255(lc: Lifecycle) -> None:
    """Megatron-Bridge #5255: a warmup callback draws from the restored streams before step 1."""
    import torch

    torch.randn(4)  # a warmup batch


def data_loader_5257(lc: Lifecycle) -> None:
    """Megatron-Bridge #5257: a DataLoader without a generator, built after the load, draws its base seed
    when iterated."""
    import torch

    loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2)
    next(iter(loader))


def reseed_9935(lc: Lifecycle) -> None:
    """ms-swift #9935: the script seeds again after the checkpoint load, with the run's seed: each stream
    goes back to where the seed put it, not where the checkpoint left it."""
    import numpy
    import torch
    from megatron.core import tensor_parallel

    seed = lc.runtime.config.training.seed
    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)
    tensor_parallel.model_parallel_cuda_manual_seed(seed)  # the tracker was not drawn from: it stays as it was


def tracker_reseed(lc: Lifecycle) -> None:
    """A script that seeds megatron's model-parallel RNG tracker with a seed of its own after the load."""
    from megatron.core import tensor_parallel

    tensor_parallel.model_parallel_cuda_manual_seed(lc.runtime.config.training.seed + 7)


def optimizer_3832(lc: Lifecycle) -> None:
    """Megatron-Bridge #3832: the Adam step dropped on resume; here the optimizer's state is built again
    after the load (each inner torch optimizer's state emptied, as a fresh optimizer has it)."""
    optimizer = lc.runtime.optimizer
    for inner in getattr(optimizer, "chained_optimizers", None) or [optimizer]:
        inner.optimizer.state.clear()  # type: ignore[attr-defined]


def own_generators(lc: Lifecycle) -> None:
    """Draws from generators of one's own between the load and the first step: no global stream moves."""
    import torch

    torch.rand(4, generator=torch.Generator().manual_seed(3))
    random.Random(3).random()


class NumpyDataset:
    """A map-style dataset that augments each sample with a NumPy generator of its own."""

    def __init__(self) -> None:
        import numpy

        self.rng = numpy.random.default_rng(5)

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> float:
        return index + float(self.rng.random())  # the augmentation's draw


def _loader(dataset: Any = None) -> Any:
    """A shuffling DataLoader with a generator of its own: its base seed and its order are drawn from it."""
    import torch

    generator = torch.Generator().manual_seed(11)
    return torch.utils.data.DataLoader(dataset or list(range(8)), batch_size=2, shuffle=True, generator=generator)


def data_clean(lc: Lifecycle) -> None:
    """A DataLoader with its own generator and a dataset with its own, given to the window after the load
    and first iterated in the first step: nothing of the data's moves."""
    from lifecycle.resume import watch_data

    watch_data(lc, _loader(NumpyDataset()))


def data_loader_generator(lc: Lifecycle) -> None:
    """Megatron-Bridge #5257 with `DataLoader(generator=g)`: its iterator, made after the load, draws the
    base seed from the loader's own generator."""
    from lifecycle.resume import watch_data

    loader = _loader()
    watch_data(lc, loader)
    iter(loader)


def data_numpy_dataset(lc: Lifecycle) -> None:
    """A dataset's own NumPy generator drawn before the first step (a sample looked at after the load)."""
    from lifecycle.resume import watch_data

    dataset = NumpyDataset()
    watch_data(lc, _loader(dataset))
    dataset[0]


HOOKS: dict[str, Callable[[Lifecycle], None] | None] = {
    "clean": None,
    "warmup_5255": warmup_5255,
    "data_loader_5257": data_loader_5257,
    "reseed_9935": reseed_9935,
    "tracker_reseed": tracker_reseed,
    "optimizer_3832": optimizer_3832,
    "own_generators": own_generators,
    "data_clean": data_clean,
    "data_loader_generator": data_loader_generator,
    "data_numpy_dataset": data_numpy_dataset,
}


def _hand_step(lc: Lifecycle, data: Iterator[Any]) -> float | None:
    """A hand-written step: megatron's schedule and the lifecycle's optimizer."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    from lifecycle.core_entry import train

    rt = lc.runtime
    for chunk in rt.model or ():
        chunk.zero_grad_buffer()  # type: ignore[attr-defined]
    rt.optimizer.zero_grad()  # type: ignore[union-attr]
    losses = get_forward_backward_func()(
        forward_step_func=train.forward_step,
        data_iterator=data,
        model=list(rt.model or ()),
        num_microbatches=1,
        seq_length=16,
        micro_batch_size=1,
        forward_only=False,
    )
    rt.optimizer.step()  # type: ignore[union-attr]
    return float(losses[0]["lm loss"]) if losses else None


def offset_4565(lc: Lifecycle, start: int) -> int:
    """Megatron-Bridge #4565: the resume offset applied twice; the first step is numbered (and fed) as
    step 2 × start + 1."""
    from lifecycle.core_entry import train

    step = 2 * start + 1
    data = train.synthetic_batches(lc.runtime.config, lc.runtime.vocab_size or 256, 7, skip=2 * start)
    with lc.step(step) as handle:
        handle.loss = _hand_step(lc, data)
    return step


def _records(log_dir: str, *events: str) -> list[dict[str, Any]]:
    lines = Path(log_dir, "rank-00000.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["event"] in events]


def _save(root: str, provider: str) -> int:
    """`SAVED` steps of `provider`, saved under root/ck; the child processes left after the save."""
    import multiprocessing

    from lifecycle.core_entry.train import save_after_steps, train_steps

    config = RunConfig.preset("tiny-gpt", [*TINY, f"checkpoint.save={root}/ck", f"logging.log_dir={root}/fresh"])
    with Lifecycle(config, provider) as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        train_steps(lc, SAVED)
        save_after_steps(lc, SAVED)
        return len(multiprocessing.active_children())


def _resume(root: str, label: str, hook: Callable[[Lifecycle], None] | None, provider: str = "gpt") -> dict[str, Any]:
    from lifecycle.core_entry.train import checkpoint_step, train_steps

    log_dir = f"{root}/{label}"
    config = RunConfig.preset("tiny-gpt", [*TINY, f"checkpoint.load={root}/ck", f"logging.log_dir={log_dir}"])
    with Lifecycle(config, provider) as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        if label == "offset_4565":
            first = offset_4565(lc, checkpoint_step(lc.runtime))
        else:
            if hook is not None:
                hook(lc)
            first = train_steps(lc, 1)[0].step
    findings = audit([str(Path(log_dir, "rank-00000.jsonl"))], jobs=1).findings
    return {
        "first": first,
        "restored": _records(log_dir, "streams_restored"),
        "checked": _records(log_dir, "streams_checked"),
        "la027": [f.message for f in findings if f.rule == "LA027"],
    }


SHIPPED = ("copying", "gpt-builder", "hybrid-builder")
"""The shipped providers besides gpt (which the cases above use), each saved and resumed cleanly."""


def run_all() -> dict[str, Any]:
    """A save at step 2, then one resume per case; also a fresh run (no load: no window), and a clean
    save and resume of each other shipped provider."""
    root = tempfile.mkdtemp(prefix="resume-")
    children = _save(root, "gpt")
    out: dict[str, Any] = {"fresh": _records(f"{root}/fresh", "streams_restored", "streams_checked")}
    out["children_after_save"] = children
    for label, hook in HOOKS.items():
        out[label] = _resume(root, label, hook)
    out["offset_4565"] = _resume(root, "offset_4565", None)
    for provider in SHIPPED:
        _save(f"{root}/{provider}", provider)
        out[provider] = _resume(f"{root}/{provider}", "resumed", None, provider)
    return out


class _Counted:
    """A forward hook that scales each chunk's output by its forward count in this process: state that no
    checkpoint holds, as a Python-side schedule or counter that a resume starts again from 0."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, module: Any, args: Any, output: Any) -> Any:
        self.calls += 1
        return output * (1.0 + 1e-3 * self.calls)


def counting_provider(config: Any, **kw: Any) -> Any:
    """The gpt provider's model, with `_Counted` on it (`lifecycle verify-resume` finds the difference)."""
    from lifecycle.core_entry.providers import gpt_provider

    model = gpt_provider(config, **kw)
    model.register_forward_hook(_Counted())
    return model
