"""Inside the drop-in's CPU stand-ins `torch.cuda.is_available()` is true, so libraries take CUDA as
present. Nothing they then do may reach the CUDA driver (this machine has none): torch's DataLoader
with workers and `pin_memory=True` (Megatron-LM's default `--num-workers 2`) asks
`torch.accelerator` for the current device and pins each batch on a thread of its own; factory
functions take `pin_memory=True`; every `torch.accelerator` query answers. One spawned process.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

from lifecycle.launchers.local import run_ranks

QUERIES = {
    "current_device_index": (),
    "current_device_idx": (),
    "set_device_index": (0,),
    "device_count": (),
    "get_device_capability": (),
    "current_stream": (),
    "synchronize": (),
    "empty_cache": (),
    "get_memory_info": (),
    "memory_allocated": (),
    "max_memory_allocated": (),
    "memory_reserved": (),
    "memory_stats": (),
    "reset_peak_memory_stats": (),
}


def _error(fn: Any) -> str | None:
    try:
        fn()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"[:200]
    return None


def _inside_the_stand_ins() -> dict[str, Any]:
    import torch

    from lifecycle.testing import cuda_as_cpu

    data = torch.utils.data.TensorDataset(torch.arange(12.0).view(6, 2))
    out: dict[str, Any] = {}
    original = torch.accelerator.current_device_index
    with cuda_as_cpu():
        out["accelerator_available"] = torch.accelerator.is_available()
        loader = torch.utils.data.DataLoader(data, batch_size=2, num_workers=2, pin_memory=True)
        batches: list[Any] = []
        out["loader"] = _error(lambda: batches.extend(b[0].tolist() for b in loader))
        out["batches"] = batches
        out["factory_pinned"] = _error(lambda: torch.empty(4, pin_memory=True).add_(1))
        out["tensor_pinned"] = _error(lambda: torch.ones(2).pin_memory().sum())
        out["queries"] = {
            name: _error(lambda name=name, a=a: getattr(torch.accelerator, name)(*a))  # type: ignore[misc]
            for name, a in QUERIES.items()
            if hasattr(torch.accelerator, name)
        }
        out["device_index"] = _error(lambda: torch.accelerator.device_index(0).__enter__())
        out["shared"] = _stand_ins_under_two_names(
            {"torch.cuda": torch.cuda, "torch.cuda.nvtx": torch.cuda.nvtx, "torch.accelerator": torch.accelerator}
        )
    out["restored"] = torch.accelerator.current_device_index is original
    return out


def _stand_ins_under_two_names(modules: dict[str, Any]) -> dict[str, list[str]]:
    """Our stand-in functions that are reached under more than one name: torch 2.15's dynamo refuses
    one object with two tracing rules at megatron-core's first `torch.compile` (its import)."""
    names: dict[int, list[str]] = {}
    for where, module in modules.items():
        for name, value in vars(module).items():
            if callable(value) and getattr(value, "__module__", "").startswith("lifecycle."):
                names.setdefault(id(value), []).append(f"{where}.{name}")
    return {found[0]: found[1:] for found in names.values() if len(found) > 1}


@pytest.fixture(scope="module")
def inside() -> dict[str, Any]:
    return run_ranks(_inside_the_stand_ins, 1, timeout_s=300)[0]


def test_a_data_loader_with_workers_and_pinned_memory_gives_every_batch_without_a_cuda_driver(
    inside: dict[str, Any],
) -> None:
    assert inside["accelerator_available"] is True  # the loader takes the pinning path
    assert inside["loader"] is None, inside["loader"]
    assert inside["batches"] == [[[0.0, 1.0], [2.0, 3.0]], [[4.0, 5.0], [6.0, 7.0]], [[8.0, 9.0], [10.0, 11.0]]]


def test_pinned_factories_and_tensors_work_on_cpu(inside: dict[str, Any]) -> None:
    assert inside["factory_pinned"] is None, inside["factory_pinned"]
    assert inside["tensor_pinned"] is None, inside["tensor_pinned"]


def test_every_accelerator_query_answers_without_reaching_the_driver(inside: dict[str, Any]) -> None:
    assert inside["queries"] and not {k: v for k, v in inside["queries"].items() if v}
    assert inside["device_index"] is None


def test_the_accelerator_is_itself_again_after_the_rehearsal(inside: dict[str, Any]) -> None:
    assert inside["restored"] is True


def test_each_stand_in_is_its_own_function_under_one_name(inside: dict[str, Any]) -> None:
    assert inside["shared"] == {}, "torch's dynamo refuses one function object under two names with different rules"
