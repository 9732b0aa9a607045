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
    owners = [
        "optimizer"
        if getattr(e, "__self__", None) is optimizer
        else "chunk"
        if getattr(e, "__self__", None) in model
        else None
        for e in entries
    ]
    return (getattr(entries[0], "__name__", repr(entries[0])), owners[0], len(entries) if isinstance(fn, list) else 1)


def _record(out: dict[str, Any]) -> None:
    """Wrap Megatron-LM's `train_step` (train() looks it up on each call) to record losses and slots."""
    from megatron.core.utils import get_model_config
    from megatron.training import training

    original = training.train_step

    def train_step(
        forward_step_func: Any, data_iterator: Any, model: Any, optimizer: Any, *rest: Any, **kw: Any
    ) -> Any:
        config = get_model_config(model[0])
        if "slots" not in out:
            out["slots"] = {s: describe(getattr(config, s), list(model), optimizer) for s in SLOTS}
        result = original(forward_step_func, data_iterator, model, optimizer, *rest, **kw)
        out["losses"].append(float(result[0]["lm loss"]) if result[0] else None)
        out["finalizer_calls"].append(getattr(config.finalize_model_grads_func, "calls", None))
        return result

    training.train_step = train_step


class Counting:
    """A script's own wrapper of a callback (a profiler's, a straggler detector's): counts its calls
    in `out[key]` (so that what holds the count holds no reference to the callback)."""

    def __init__(self, inner: Any, out: dict[str, Any], key: str) -> None:
        self.inner, self.out, self.key = inner, out, key
        out[key] = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.out[self.key] += 1
        return self.inner(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # the lifecycle's finalizer's `calls` reads through
        return getattr(self.inner, name)


def rewrap_finalizer(script: Any, out: dict[str, Any]) -> None:
    """The script's forward step, which at its first call wraps `config.finalize_model_grads_func`
    (during `train()`, after train() bound it) with `Counting`; its count lands in `out`."""
    original = script.forward_step

    def forward_step(data_iterator: Any, model: Any) -> Any:
        from megatron.core.utils import get_model_config

        config = get_model_config(model)
        if "rewrapped" not in out:
            config.finalize_model_grads_func = Counting(config.finalize_model_grads_func, out, "rewrapped")
        return original(data_iterator, model)

    script.forward_step = forward_step  # main() passes the module's forward_step to pretrain


def run(which: str, tp: int, log_dir: str, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """The example script with `which` pretrain ("megatron" or "lifecycle"), TP=`tp`, 2 ranks."""
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"  # what Megatron-LM asks of TP > 1 runs
    sys.argv = ["pretrain_gpt_tiny.py"]
    sys.path.insert(0, str(ROOT / "examples"))
    import pretrain_gpt_tiny as script

    out: dict[str, Any] = {"losses": [], "finalizer_calls": []}
    _record(out)
    rewrap_finalizer(script, out)
    argv = ["--tensor-model-parallel-size", str(tp), *extra]
    if which == "megatron":
        from megatron.training import pretrain

        from lifecycle.testing import cuda_as_cpu

        with cuda_as_cpu():
            script.main(pretrain=pretrain, extra_argv=argv)
            out["group_names"] = group_names()
            out["after"] = after_return()
        return out
    from functools import partial

    from megatron.training import arguments

    from lifecycle.lm_dropin import pretrain as dropin

    # The script's own parse_and_validate_args runs before pretrain and, for TP > 1, reads the GPU's
    # architecture; on this CPU machine the script gets the stand-in's answer (Hopper).
    arguments.get_device_arch_version = lambda: 9

    out["result"] = script.main(pretrain=partial(dropin, log_dir=log_dir), extra_argv=argv)
    out["group_names"] = group_names()
    out["after"] = after_return()
    out["own"] = lifecycle_resources()
    return out


def group_names() -> list[str]:
    """torch's names of this rank's groups but the world's: megatron's creation names them by a
    counter, the lifecycle's own-groups creation by their ranks (a hash)."""
    from torch.distributed import distributed_c10d as c10d

    return [name for pg, name in c10d._world.pg_names.items() if pg is not c10d._world.default_pg]


def after_return() -> dict[str, Any]:
    """What a script sees once `pretrain` has returned (it logs with the rank, reads its args), then
    the script's own teardown: parallel state and process group destroyed."""
    import torch.distributed as dist
    from megatron.core import mpu
    from megatron.training import get_args

    from lifecycle.simulate import parallel_state_snapshot

    seen = {
        "parallel_state": parallel_state_snapshot(),
        "initialized": dist.is_initialized(),
        "rank": dist.get_rank(),
        "world": dist.get_world_size(),
        "dp_rank": mpu.get_data_parallel_rank(),
        "dp": mpu.get_data_parallel_world_size(),
        "tp": mpu.get_tensor_model_parallel_world_size(),
        "pp": mpu.get_pipeline_model_parallel_world_size(),
        "train_iters": get_args().train_iters,
    }
    dist.barrier()  # a collective on the default group still works
    mpu.destroy_model_parallel()
    dist.destroy_process_group()
    seen["destroyed"] = not dist.is_initialized()
    return seen


def lifecycle_resources() -> dict[str, Any]:
    """What of the lifecycle's own is left in this process: its threads, the CPU stand-ins, the resume
    window's wrappers of the random draw and seed entry points."""
    import threading

    import torch

    from lifecycle.core_entry.rehearsal import is_active

    return {
        "threads": sorted(t.name for t in threading.enumerate() if t.name.startswith("lifecycle")),
        "rehearsal": is_active(),
        "cuda_available": bool(torch.cuda.is_available()),
        "wrapped": still_wrapped(),
    }


def still_wrapped() -> list[str]:
    """The draw and seed entry points a resume window wraps (`streams.ENTRY_POINTS`) that still hold its
    wrapper (a function defined in `lifecycle.resume.streams`)."""
    import importlib

    from lifecycle.resume.streams import ENTRY_POINTS

    wrapped = []
    for _, path, attrs in ENTRY_POINTS:
        try:
            owner = importlib.import_module(path)
        except ImportError:  # a class: torch.Tensor, megatron's CudaRNGStatesTracker
            module, _, name = path.rpartition(".")
            owner = getattr(importlib.import_module(module), name)
        held = {a: getattr(getattr(owner, a, None), "__module__", "") for a in attrs}
        wrapped += [f"{path}.{a}" for a, module in held.items() if module == "lifecycle.resume.streams"]
    return wrapped


def _one_rank_call(provider: Any = None) -> Any:
    """The example script's arguments on one rank, parsed as the script does, as a MegatronLMCall."""
    sys.argv = ["pretrain_gpt_tiny.py", *_tiny()]
    from megatron.core.enums import ModelType
    from megatron.training import global_vars
    from megatron.training.argument_utils import gpt_config_from_args, pretrain_cfg_container_from_args
    from megatron.training.arguments import parse_and_validate_args

    from lifecycle.testing import MegatronLMCall

    args = global_vars._GLOBAL_ARGS or parse_and_validate_args()
    container = pretrain_cfg_container_from_args(args, None if provider is not None else gpt_config_from_args(args))
    import pretrain_gpt_tiny as script

    return MegatronLMCall(
        cfg_container=container,
        train_valid_test_dataset_provider=script.train_valid_test_datasets_provider,
        model_type=ModelType.encoder_or_decoder,
        forward_step_func=script.forward_step,
        model_provider=provider,
        args=args,
        args_validated=True,
    )


def _tiny() -> list[str]:
    sys.path.insert(0, str(ROOT / "examples"))
    import pretrain_gpt_tiny as script

    return list(script.TINY_GPT)


def _startup(phases: Any, call: Any) -> dict[str, Any]:
    """Advance a lifecycle with `phases` to CALLBACKS_BOUND; what stopped it, and the violations logged."""
    from lifecycle import Lifecycle
    from lifecycle.testing import run_config
    from states import State

    lc = Lifecycle(run_config(call.args), phases=phases, options={"keep_records": True, "environment_checks": False})
    out: dict[str, Any] = {}
    try:
        with lc:
            lc.advance_to(State.CALLBACKS_BOUND)
    except Exception as exc:
        out = {"error": type(exc).__name__, "message": str(exc)}
    out["state"] = lc.state.name
    out["violations"] = [
        {k: r.get(k) for k in ("target", "kind", "trigger")} for r in lc.records if r["event"] == "tripwire_violation"
    ]
    out["entered"] = [r["dest"] for r in lc.records if r["event"] == "transition_completed"]
    out["settings"] = [
        {k: r.get(k) for k in ("compared", "objects", "mismatches")}
        for r in lc.records
        if r["event"] == "settings_checked"
    ]
    return out


def misordered() -> dict[str, Any]:
    """Two deliberately misordered variants of the drop-in's phases, one after the other on one rank:
    process groups created in SERVICES_READY, and seeding moved into MODEL_BUILT."""
    from megatron.training import initialize as mi

    from lifecycle.lm_dropin.entry import MegatronLMPhases
    from states import State

    call = _one_rank_call()

    def groups_first(ctx: Any, enter: Any) -> Any:
        mi._initialize_distributed(None, None, None)
        return enter(ctx)

    def seeds_first(ctx: Any, enter: Any) -> Any:
        mi._set_random_seed(call.args.seed)
        return enter(ctx)

    groups_in_services = MegatronLMPhases(call).around(State.SERVICES_READY, enter=groups_first)
    seeds_in_model = MegatronLMPhases(call).around(State.MODEL_BUILT, enter=seeds_first)
    return {"groups_in_services": _startup(groups_in_services, call), "seeds_in_model": _startup(seeds_in_model, call)}


class BridgeLike:
    """A Megatron-Bridge-shaped provider: `.provide(pre_process, post_process, vp_stage)`."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def provide(self, pre_process: bool = True, post_process: bool = True, vp_stage: Any = None) -> Any:
        return self.fn(pre_process=pre_process, post_process=post_process, vp_stage=vp_stage)


class NotAProvider:
    """Neither callable nor a builder."""

    payload = "x" * 10_000


def provider_shapes(tensorboard_dir: str) -> dict[str, Any]:
    """Each provider shape through the drop-in's startup on one rank: the model it built, or the
    refusal; then, in the same process, the drop-in's ledgers (`ledgers`)."""
    from megatron.training.argument_utils import gpt_config_from_args
    from megatron.training.models.gpt import GPTModelBuilder

    from lifecycle.core_entry.providers import gpt_provider
    from lifecycle.lm_dropin.entry import MegatronLMPhases

    call = _one_rank_call(provider=lambda: None)
    model_cfg = gpt_config_from_args(call.args)

    def keyword(
        pre_process: bool = True,
        post_process: bool = True,
        vp_stage: Any = None,
        config: Any = None,
        pg_collection: Any = None,
    ) -> Any:
        return GPTModelBuilder(model_cfg).build_model(
            pg_collection, pre_process=pre_process, post_process=post_process, vp_stage=vp_stage
        )

    def failing(pre_process: bool = True, post_process: bool = True) -> Any:
        raise RuntimeError("no weights here")

    shapes = {
        "keyword": keyword,
        "lifecycle": gpt_provider,
        "builder": GPTModelBuilder(model_cfg),
        "model_config": model_cfg,
        "bridge": BridgeLike(keyword),
        "refused": NotAProvider(),
        "failing": failing,
    }
    out = {}
    for label, provider in shapes.items():
        import dataclasses

        shaped = dataclasses.replace(call, model_provider=provider)
        out[label] = _startup(MegatronLMPhases(shaped), shaped)
    out["mismatch"] = mismatch()
    out["ledgers"] = ledgers(tensorboard_dir)  # last: it unsets the script's global variables
    return out


def mismatch() -> dict[str, Any]:
    """The container edited after it was built from the args: 4 layers there, 2 in the args."""
    import dataclasses

    from megatron.training.argument_utils import gpt_config_from_args

    from lifecycle.lm_dropin.entry import MegatronLMPhases

    call = _one_rank_call(provider=lambda: None)
    container = call.cfg_container
    container.model = gpt_config_from_args(call.args)
    container.model.transformer.num_layers = 4
    edited = dataclasses.replace(call, cfg_container=container, model_provider=None)
    return _startup(MegatronLMPhases(edited), edited)


def ledgers(tensorboard_dir: str) -> dict[str, Any]:
    """The drop-in's startup to CALLBACKS_BOUND and its shutdown on one rank, twice: with the script's
    global variables (its `parse_and_validate_args` set them: adopted), then with none (the script
    parsed no arguments; `pretrain` derives them and its `set_global_variables` makes them, with a
    tensorboard writer)."""
    import dataclasses

    from megatron.training import global_vars

    from lifecycle.lm_dropin.entry import args_from_container

    call = _one_rank_call()
    out = {"adopted": _ledger_of(call)}
    global_vars.unset_global_variables()
    container = call.cfg_container
    container.logger.tensorboard_dir = tensorboard_dir
    derived = dataclasses.replace(call, args=args_from_container(container), args_validated=False)
    out["created"] = _ledger_of(derived)
    return out


def _ledger_of(call: Any) -> dict[str, Any]:
    """The ledger at CALLBACKS_BOUND and the entries its probes see alive there, then after the
    shutdown: the ledger, the leaks it logged, and which of Megatron-LM's global variables, rerun
    state machine and micro-batch calculator remain."""
    from megatron.core import num_microbatches_calculator, rerun_state_machine
    from megatron.training import global_vars

    from lifecycle import Lifecycle
    from lifecycle.lm_dropin.entry import MegatronLMPhases
    from lifecycle.testing import leaked, run_config
    from states import State

    lc = Lifecycle(
        run_config(call.args),
        phases=MegatronLMPhases(call),
        options={"keep_records": True, "environment_checks": False},
    )
    with lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        ledger = lc.ledger
        alive = [(e.state.name, e.name) for e in lc._cycles.ledger.entries if not e.gone()]
    remaining = [name for name, value in vars(global_vars).items() if name.startswith("_GLOBAL_") and value is not None]
    if rerun_state_machine._GLOBAL_RERUN_STATE_MACHINE is not None:
        remaining.append("rerun state machine")
    if num_microbatches_calculator._GLOBAL_NUM_MICROBATCHES_CALCULATOR is not None:
        remaining.append("micro-batch calculator")
    return {
        "ledger": ledger,
        "alive": alive,
        "after": lc.ledger,
        "leaked": leaked(lc.records),
        "remaining": remaining,
        "script_args_kept": global_vars._GLOBAL_ARGS is call.args,
    }


def run_with_fault(log_dir: str, step: int) -> dict[str, Any]:
    """The example script with the lifecycle's pretrain, DP=2, a 2-minute collective timeout, whose
    forward step raises on rank 1 at training step `step` (1-based); what `pretrain` raised on this
    rank, if anything."""
    sys.path.insert(0, str(ROOT / "examples"))
    import pretrain_gpt_tiny as script

    original = script.forward_step

    def forward_step(data_iterator: Any, model: Any) -> Any:
        from megatron.training import get_args

        if os.environ["RANK"] == "1" and get_args().curr_iteration == step - 1:
            raise RuntimeError(f"injected fault on rank 1 at step {step}")
        return original(data_iterator, model)

    script.forward_step = forward_step  # main() passes the module's forward_step to pretrain
    try:
        run("lifecycle", 1, log_dir, ("--distributed-timeout-minutes", "2"))
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"error": None}


def datasets_per_virtual_stage(script: Any) -> None:
    """The script's dataset provider taking `vp_stage`, as Megatron-LM asks of one with virtual pipelines."""
    original = script.train_valid_test_datasets_provider

    def train_valid_test_datasets_provider(train_val_test_num_samples: Any, vp_stage: Any = None) -> Any:
        script.stages_asked = [*getattr(script, "stages_asked", []), vp_stage]
        return original(train_val_test_num_samples)

    train_valid_test_datasets_provider.is_distributed = True  # type: ignore[attr-defined]  # Megatron-LM's marker
    script.train_valid_test_datasets_provider = train_valid_test_datasets_provider
