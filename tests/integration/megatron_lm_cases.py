"""Children for test_megatron_lm.py: the example script (`examples/pretrain_gpt_tiny.py`) run on
spawned gloo ranks with Megatron-LM's own `pretrain` (inside the CPU stand-ins) or the lifecycle's,
recording each `train_step`'s losses and, at the first step, what each scheduler slot holds."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SLOTS = ("finalize_model_grads_func", "grad_scale_func", "no_sync_func", "grad_sync_func", "param_sync_func")


def describe(value: Any, model: list[Any], optimizer: Any) -> Any:
    """A slot in terms both runs share: the function's name, whose method it is, how many chunks."""
    if value is None:
        return None
    fn = getattr(value, "fn", value)  # the lifecycle's CountingFinalizer around megatron's function,
    fn = getattr(fn, "func", fn)  # which it binds to the model's process groups (functools.partial)
    entries = fn if isinstance(fn, list) else [fn]
    owners = ["optimizer" if getattr(e, "__self__", None) is optimizer else
              "chunk" if getattr(e, "__self__", None) in model else None for e in entries]
    return (getattr(entries[0], "__name__", repr(entries[0])), owners[0], len(entries) if isinstance(fn, list) else 1)


def _record(out: dict[str, Any]) -> None:
    """Wrap Megatron-LM's `train_step` (train() looks it up on each call) to record losses and slots."""
    from megatron.core.utils import get_model_config
    from megatron.training import training

    original = training.train_step

    def train_step(forward_step_func: Any, data_iterator: Any, model: Any, optimizer: Any, *rest: Any, **kw: Any) -> Any:
        config = get_model_config(model[0])
        if "slots" not in out:
            out["slots"] = {s: describe(getattr(config, s), list(model), optimizer) for s in SLOTS}
        result = original(forward_step_func, data_iterator, model, optimizer, *rest, **kw)
        out["losses"].append(float(result[0]["lm loss"]) if result[0] else None)
        out["finalizer_calls"].append(getattr(config.finalize_model_grads_func, "calls", None))
        return result

    training.train_step = train_step


def run(which: str, tp: int, log_dir: str) -> dict[str, Any]:
    """The example script with `which` pretrain ("megatron" or "lifecycle"), TP=`tp`, 2 ranks."""
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"  # what Megatron-LM asks of TP > 1 runs
    sys.argv = ["pretrain_gpt_tiny.py"]
    sys.path.insert(0, str(ROOT / "examples"))
    import pretrain_gpt_tiny as script

    out: dict[str, Any] = {"losses": [], "finalizer_calls": []}
    _record(out)
    argv = ["--tensor-model-parallel-size", str(tp)]
    if which == "megatron":
        from megatron.training import pretrain

        from lifecycle.megatron_lm.entry import cuda_as_cpu

        with cuda_as_cpu():
            script.main(pretrain=pretrain, extra_argv=argv)
        return out
    from functools import partial

    from lifecycle.megatron_lm import pretrain as dropin

    out["result"] = script.main(pretrain=partial(dropin, log_dir=log_dir), extra_argv=argv)
    return out
