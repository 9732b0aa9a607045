"""Children for test_lm_dropin_resolves_names_late.py: a script that replaces, before `pretrain`, every
name Megatron-LM's startup looks up in its modules' globals that the drop-in calls too
(`_late.LOOKUPS`): each replacement counts its calls (in `script.late_calls`) and does what the
original did, except `finalize_model_grads`'s, which also adds 0.01 to every gradient after
finalizing (so the losses show whether it ran)."""

from __future__ import annotations

import sys
from typing import Any

NUDGE = 0.01


def _counting(calls: dict[str, int], key: str, original: Any) -> Any:
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[key] += 1
        return original(*args, **kwargs)

    return counted


class _CountedModule:
    """A module whose attribute reads are counted (Megatron-LM reads `tensor_parallel.get_cuda_rng_tracker`)."""

    def __init__(self, inner: Any, calls: dict[str, int], key: str) -> None:
        self._inner, self._calls, self._key = inner, calls, key

    def __getattr__(self, name: str) -> Any:
        self._calls[self._key] += 1
        return getattr(self._inner, name)


def _counted_class(original: type, calls: dict[str, int], key: str) -> Any:
    """A stand-in for `original` whose `isinstance` checks and `use_mpu_process_groups()` calls count."""

    class Meta(type):
        def __instancecheck__(cls, obj: object) -> bool:
            calls[key] += 1
            return isinstance(obj, original)

    class Counted(metaclass=Meta):
        @staticmethod
        def use_mpu_process_groups(*args: Any, **kwargs: Any) -> Any:
            calls[key] += 1
            return original.use_mpu_process_groups(*args, **kwargs)  # type: ignore[attr-defined]  # megatron's

    return Counted


def finalize_and_nudge(original: Any, calls: dict[str, int]) -> Any:
    """The script's finalizer: Megatron-LM's, then every gradient of the model plus NUDGE."""

    def finalize_model_grads(model: Any, *args: Any, **kwargs: Any) -> Any:
        calls["megatron.training.training.finalize_model_grads"] += 1
        out = original(model, *args, **kwargs)
        for chunk in model:
            for p in chunk.parameters():
                grad = getattr(p, "main_grad", None)
                if grad is not None:
                    grad.add_(NUDGE)
        return out

    return finalize_model_grads


def patch_every_late_name(script: Any) -> None:
    """The hook: each name the drop-in calls replaced in its module, counting into `script.late_calls`."""
    import megatron.training.initialize  # the module whose globals are patched
    import megatron.training.training  # noqa: F401

    from lifecycle.lm_dropin.entry import LOOKUPS

    calls: dict[str, int] = {}
    for where, names in LOOKUPS.items():
        module = sys.modules[where.partition(":")[0]]
        for name, how in names.items():
            if not how.called:
                continue
            key, original = f"{module.__name__}.{name}", vars(module)[name]
            calls[key] = 0
            if name == "finalize_model_grads":
                replacement = finalize_and_nudge(original, calls)
            elif name == "tensor_parallel":
                replacement = _CountedModule(original, calls, key)
            elif name.endswith("ProcessGroupCollection"):
                replacement = _counted_class(original, calls, key)
            else:
                replacement = _counting(calls, key, original)
            setattr(module, name, replacement)
    script.late_calls = calls


def patched_not_run() -> dict[str, Any]:
    """The drop-in's startup on one rank after the script replaced two names the drop-in does not call
    (`training.print_datetime`, `initialize.init_persistent_async_worker`): what stopped it, and where."""
    from megatron.training import initialize, training

    from lifecycle.lm_dropin.entry import MegatronLMPhases
    from tests.integration.megatron_lm_cases import _one_rank_call, _startup

    call = _one_rank_call()

    def print_datetime(string: str, override_timestamp: Any = None) -> None: ...

    def init_persistent_async_worker(rank: int, start_method: str) -> None: ...

    training.print_datetime, initialize.init_persistent_async_worker = print_datetime, init_persistent_async_worker
    return _startup(MegatronLMPhases(call), call)
