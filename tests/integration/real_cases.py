"""Cases run inside spawned ranks (lifecycle.launch.run_ranks): the real phases on megatron-core.

Each case drives a `Lifecycle` with the real `MegatronPhases` under the CPU rehearsal and returns
plain data for the test process to assert on. Cases run one after another in the same ranks, so
each must shut its lifecycle down (releasing process groups and parallel state).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

from lifecycle import Lifecycle, LifecycleError, RunConfig
from states import State
from tests.integration import tiny_gpt

TINY = ["model.num_layers=2", *tiny_gpt.TINY]


def _config(*overrides: str) -> RunConfig:
    return RunConfig.preset("tiny-gpt", [*TINY, *overrides])


def _summary(lc: Lifecycle) -> dict[str, Any]:
    rt = lc.runtime
    binding = rt.binding
    return {
        "state": lc.state.name,
        "chunks": len(rt.model) if rt.model else 0,
        "optimizer": rt.optimizer is not None,
        "binding": None if binding is None else binding.log_fields(),
        "vocab_size": rt.vocab_size,
        "world_size": rt.world_size,
    }


def _train(lc: Lifecycle, steps: int) -> list[Any]:
    from lifecycle.core_entry.train import train_steps

    return [(r.loss, r.finalizer_calls) for r in train_steps(lc, steps)]


def training(log_dir: str, *overrides: str, provider: Any = None, steps: int = 1) -> dict[str, Any]:
    with Lifecycle(_config(*overrides), provider, log_dir) as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        out = _summary(lc)
        out["steps"] = _train(lc, steps)
        out["finalizer"] = lc.runtime.binding.watchdog.finalizer.calls
        out["pipeline_ranks"] = _pp_info()
    out["log"] = lc.log_path and str(lc.log_path)
    return out


def _pp_info() -> tuple[int, int]:
    from megatron.core import parallel_state as ps

    return ps.get_pipeline_model_parallel_rank(), ps.get_pipeline_model_parallel_world_size()


def _scheduler_config(lc: Lifecycle) -> Any:
    from megatron.core.utils import get_model_config

    return get_model_config(lc.runtime.model[0])


def _still_the_first(first_config: Any, lc: Lifecycle) -> bool:
    """Whether the scheduler's config now is the first generation's object. An id alone cannot
    say: CPython gives a freed object's address to the next one, so the ids can match."""
    return first_config() is _scheduler_config(lc)


def rebuild_rebinds(log_dir: str, provider: Any) -> dict[str, Any]:
    import gc
    import weakref

    with Lifecycle(_config(), provider, log_dir) as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        first = lc.runtime.binding.log_fields()
        old_model = weakref.ref(lc.runtime.model[0])
        first_config = weakref.ref(_scheduler_config(lc))
        lc.rebuild()
        gc.collect()
        released = old_model() is None
        lc.advance_to(State.CALLBACKS_BOUND)
        second = lc.runtime.binding.log_fields()
        same = _still_the_first(first_config, lc)
        steps = _train(lc, 1)
    return {"first": first, "second": second, "old_model_released": released, "steps": steps, "same_config": same}


def plan_stops(log_dir: str, plan: str) -> dict[str, Any]:
    import torch.distributed as dist

    with Lifecycle(_config(f"plan={plan}"), None, log_dir) as lc:
        lc.advance_to(lc.target)
        out = _summary(lc)
        out["dist_initialized"] = dist.is_initialized()
        try:
            lc.advance_to(State.CALLBACKS_BOUND)
        except LifecycleError as exc:
            out["beyond"] = type(exc).__name__
    out["dist_after_shutdown"] = dist.is_initialized()
    return out


def rl_single_initialization(log_dir: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with Lifecycle(_config("plan=rl"), None, log_dir) as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        try:
            lc.restart()
        except LifecycleError as exc:
            out["restart"] = type(exc).__name__
        second = Lifecycle(_config("plan=rl"), None, os.path.join(log_dir, "second"), run_id="second")
        try:
            second.advance_to(State.DISTRIBUTED)
        except LifecycleError as exc:
            out["second_init"] = (type(exc).__name__, str(exc))
        out["second_state"] = second.state.name
        second.shutdown()
        out["first_state"] = lc.state.name
    return out


def restart_after_failure(log_dir: str) -> dict[str, Any]:
    with Lifecycle(_config(), None, log_dir) as lc:
        lc.advance_to(State.MODEL_BUILT)
        lc.fail("injected")
        lc.restart()
        generation = lc.runtime.generation
        lc.advance_to(State.CALLBACKS_BOUND)
        steps = _train(lc, 1)
    return {"generation": generation, "steps": steps, "state": lc.state.name}


def restart_rebinds(log_dir: str, provider: Any) -> dict[str, Any]:
    import weakref

    with Lifecycle(_config(), provider, log_dir) as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        first = lc.runtime.binding.log_fields()
        first_config = weakref.ref(_scheduler_config(lc))
        lc.restart()
        lc.advance_to(State.CALLBACKS_BOUND)
        second = lc.runtime.binding.log_fields()
        same = _still_the_first(first_config, lc)
        steps = _train(lc, 1)
        generation = lc.runtime.generation
    out = {"first": first, "second": second, "steps": steps, "generation": generation, "same_config": same}
    return {**out, "log": str(lc.log_path)}


def drift(log_dir: str) -> dict[str, Any]:
    from lifecycle import ConfigMutated

    out: dict[str, Any] = {}
    with Lifecycle(_config(), None, log_dir) as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        _train(lc, 2)
        lc.check_config()  # training through megatron's schedule leaves the config as built
        lc.rebuild()
        lc.advance_to(State.CALLBACKS_BOUND)
        lc.runtime.model[0].config.hidden_dropout = 0.5
        try:
            lc.check_config()
        except ConfigMutated as exc:
            out["mutated"] = (exc.field, exc.validated, exc.current)
        out["state"] = lc.state.name
    return out


CASES: dict[str, Callable[..., dict[str, Any]]] = {
    "training": training,
    "rebuild": rebuild_rebinds,
    "plan": plan_stops,
    "rl": rl_single_initialization,
    "restart": restart_after_failure,
    "drift": drift,
    "restart-rebinds": restart_rebinds,
}


def run_cases(cases: list[tuple[str, str, tuple[Any, ...], dict[str, Any]]]) -> dict[str, Any]:
    """Run (label, case, args, kwargs) in order on this rank; errors are returned, not raised."""
    root = os.environ.get("LIFECYCLE_TEST_ROOT") or tempfile.mkdtemp()
    results: dict[str, Any] = {}
    for label, case, args, kwargs in cases:
        try:
            results[label] = CASES[case](os.path.join(root, label), *args, **kwargs)
        except Exception as exc:  # reported per case to the test process
            import traceback

            results[label] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    return results
