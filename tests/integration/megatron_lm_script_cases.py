"""Children for test_megatron_lm_entry_scripts.py: Megatron-LM's own `pretrain_gpt.py` (core_v0.19.0,
vendored in tests/fixtures with its LICENSE and the two repository modules it imports), run as
`__main__` with its own command line on spawned gloo ranks: once as Megatron-LM ships it (the
vendored text without its one added import line, inside the CPU stand-ins) and once as vendored,
with `from lifecycle.lm_dropin import pretrain`.

Each rank records, per `train_step`: the loss and the grad norm `train_step` returns, and the
finalizer calls seen by a counting wrapper the harness puts around `config.finalize_model_grads_func`
at the first step (a script-level rewrap, during `train()`); after the script's `pretrain`
returns: what is still up (`megatron_lm_cases.after_return`, which then tears it down)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from tests.integration.megatron_lm_cases import Counting, after_return, lifecycle_resources
from tests.integration.ports import new_rendezvous

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TAG = "megatron_lm_core_v0.19.0"
ONE_CHANGE = "from lifecycle.lm_dropin import pretrain  # the one change: was megatron.training's pretrain\n"
MODULES = ("gpt_builders", "model_provider")
"""Repository modules `pretrain_gpt.py` imports (not in the wheel), vendored unchanged."""

TINY = [
    "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
    "--seq-length", "32", "--max-position-embeddings", "32",
    "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "5",
    "--lr", "0.001", "--seed", "1234", "--mock-data", "--split", "1,0,0",
    "--tokenizer-type", "NullTokenizer", "--vocab-size", "1000",
    "--transformer-impl", "local", "--no-gradient-accumulation-fusion", "--distributed-backend", "gloo",
    "--eval-iters", "0", "--eval-interval", "1000", "--log-interval", "1",
    "--no-persist-layer-norm", "--no-masked-softmax-fusion", "--no-bias-dropout-fusion",
    "--no-rope-fusion", "--no-bias-gelu-fusion",
]  # fmt: skip
"""Tiny sizes, mock data, CPU kernels; `--num-workers` left at Megatron-LM's default (2)."""


def script_text(which: str) -> str:
    """`pretrain_gpt.py` as vendored ("lifecycle"), or as Megatron-LM ships it ("megatron")."""
    text = (FIXTURES / f"{TAG}_pretrain_gpt.py.txt").read_text()
    assert text.count(ONE_CHANGE) == 1
    return text.replace(ONE_CHANGE, "") if which == "megatron" else text


def install_modules(where: Path) -> None:
    """The repository modules the script imports, as files on `sys.path` (as in a checkout)."""
    where.mkdir(parents=True, exist_ok=True)
    for name in MODULES:
        target = where / f"{name}.py"
        if not target.exists():
            target.write_text((FIXTURES / f"{TAG}_{name}.py.txt").read_text())
    sys.path.insert(0, str(where))


def _record(out: dict[str, Any]) -> None:
    """Wrap Megatron-LM's `train_step` (train() looks it up on each call): losses, grad norms, and
    the calls of a counting wrapper put around the finalizer at the first step."""
    from megatron.core.utils import get_model_config
    from megatron.training import training

    original = getattr(training.train_step, "recorded", training.train_step)

    def train_step(forward_step_func: Any, data_iterator: Any, model: Any, *rest: Any, **kw: Any) -> Any:
        config = get_model_config(model[0])
        if "rewrapped" not in out:
            config.finalize_model_grads_func = Counting(config.finalize_model_grads_func, out, "rewrapped")
        before = out["rewrapped"]
        result = original(forward_step_func, data_iterator, model, *rest, **kw)
        loss = result[0].get("lm loss") if result[0] else None
        out["losses"].append(None if loss is None else float(loss))
        out["grad_norms"].append(None if result[5] is None else float(result[5]))
        out["finalizer_calls"].append(out["rewrapped"] - before)
        return result

    train_step.recorded = original  # type: ignore[attr-defined]  # the next run wraps the original
    training.train_step = train_step


LAYOUTS = {"tp1": (1, 1), "tp2": (2, 1), "pp2": (1, 2)}
"""A layout of the 2 ranks by name: (TP, PP); DP is what is left."""


def runs(order: list[tuple[str, str]], modules: str, log_root: str) -> dict[str, dict[str, Any]]:
    """`run` for each (which, layout) in `order`, one after the other in this process (one megatron
    import for all), each from what a new process has: between runs the script's process group and
    parallel state are gone (`after_return` destroyed them), Megatron-LM's global variables, rerun
    state machine and micro-batch calculator are unset, and the rendezvous port is a new one.
    Keyed "which-layout"."""
    from megatron.core import num_microbatches_calculator, rerun_state_machine
    from megatron.training import global_vars

    out = {}
    for i, (which, layout) in enumerate(order):
        key = f"{which}-{layout}"
        new_rendezvous(log_root, f"{i}-{key}")
        out[key] = run(which, layout, modules, str(Path(log_root) / key))
        global_vars.unset_global_variables()
        rerun_state_machine.destroy_rerun_state_machine()
        num_microbatches_calculator.destroy_num_microbatches_calculator()
    return out


def run(which: str, layout: str, modules: str, log_dir: str) -> dict[str, Any]:
    """Megatron-LM's `pretrain_gpt.py` as `__main__` with `which` pretrain, in `layout`, 2 ranks."""
    import multiprocessing

    multiprocessing.set_start_method("fork", force=True)  # torchrun's: the data loader's workers
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"  # what Megatron-LM asks of TP > 1 runs
    install_modules(Path(modules))
    tp, pp = LAYOUTS[layout]
    sys.argv = ["pretrain_gpt.py", *TINY, "--tensor-model-parallel-size", str(tp)]
    sys.argv += ["--pipeline-model-parallel-size", str(pp)]
    code = compile(script_text(which), "pretrain_gpt.py", "exec")
    out: dict[str, Any] = {"losses": [], "grad_norms": [], "finalizer_calls": []}
    _record(out)
    namespace = {"__name__": "__main__", "__file__": str(Path(modules) / "pretrain_gpt.py")}
    if which == "megatron":
        from lifecycle.testing import cuda_as_cpu

        with cuda_as_cpu():
            exec(code, namespace)
            out["after"] = after_return()
    else:
        from megatron.training import arguments

        # The script parses its arguments before pretrain and, for TP > 1, reads the GPU's
        # architecture; on this CPU machine it gets the stand-in's answer (Hopper).
        arguments.get_device_arch_version = lambda: 9
        os.environ["LIFECYCLE_LOG_DIR"] = log_dir
        exec(code, namespace)
        out["after"] = after_return()
        out["own"] = lifecycle_resources()
    return out
