"""Megatron-LM's own `pretrain` runs on a CPU machine inside `cuda_as_cpu`: what `megatron.training`
reads of CUDA beyond the rehearsal's patches says "one device of compute capability 9.0, no memory
in use, no graph being captured", setting the device and resetting the peak memory do nothing,
compilation is off (megatron's fused functions run eagerly), and the dataset helper is the
compiled one the wheel ships (no `make`). Afterwards torch and megatron are as they were. In one
process on CPU (the runs of `pretrain` inside it are tests/integration/test_megatron_lm.py's)."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

import torch
import torch._dynamo.config as dynamo_config
from megatron.core import datasets
from megatron.core.datasets import utils as dataset_utils

from lifecycle.testing import cuda_as_cpu

READ = [
    "is_available",
    "device_count",
    "set_device",
    "get_device_properties",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "reset_peak_memory_stats",
    "is_current_stream_capturing",
    "get_device_capability",
]


def test_inside_cuda_as_cpu_megatron_training_sees_one_capable_device_with_no_memory_in_use() -> None:
    with cuda_as_cpu():
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1
        assert torch.cuda.set_device(0) is None and torch.cuda.reset_peak_memory_stats() is None
        properties = torch.cuda.get_device_properties(0)
        assert (properties.major, properties.minor, properties.name) == (9, 0, "cpu-rehearsal")
        assert (properties.total_memory, properties.multi_processor_count) == (0, 1)
        assert torch.cuda.get_device_capability() == torch.cuda.get_device_capability(0) == (9, 0)
        used = [torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated(0), torch.cuda.memory_reserved()]
        assert [*used, torch.cuda.max_memory_reserved(device=0)] == [0, 0, 0, 0]
        assert torch.cuda.is_current_stream_capturing() is False
        assert dynamo_config.disable is True


def test_inside_cuda_as_cpu_an_optimizer_steps_without_reading_the_cuda_stream() -> None:
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.Adam([weight], capturable=False)
    with cuda_as_cpu():
        weight.grad = torch.ones(2)
        optimizer.step()
    assert weight.tolist() != [1.0, 1.0]


def test_inside_cuda_as_cpu_the_dataset_helper_is_the_compiled_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "megatron.core.datasets.helpers_cpp", raising=False)
    monkeypatch.delattr(datasets, "helpers_cpp", raising=False)  # imported by an earlier test's run: import anew
    with cuda_as_cpu():
        dataset_utils.compile_helpers()  # megatron's runs make, for a Makefile the wheel does not ship
    assert sys.modules["megatron.core.datasets.helpers_cpp"].__file__.endswith(".so")


def test_after_cuda_as_cpu_torch_and_megatron_are_as_they_were() -> None:
    before = {name: getattr(torch.cuda, name) for name in READ}
    compile_helpers, disable = dataset_utils.compile_helpers, dynamo_config.disable
    check = torch.optim.Optimizer.__dict__.get("_accelerator_graph_capture_health_check")
    with cuda_as_cpu():
        pass
    assert {name: getattr(torch.cuda, name) for name in READ} == before
    assert (dataset_utils.compile_helpers, dynamo_config.disable) == (compile_helpers, disable)
    assert torch.optim.Optimizer.__dict__.get("_accelerator_graph_capture_health_check") is check
    assert not torch.cuda.is_available()


def test_a_failure_inside_cuda_as_cpu_puts_everything_back_too() -> None:
    before = {name: getattr(torch.cuda, name) for name in READ}
    with pytest.raises(RuntimeError, match="startup failed"), cuda_as_cpu():
        raise RuntimeError("startup failed")
    assert {name: getattr(torch.cuda, name) for name in READ} == before
    with cuda_as_cpu():  # and a next one starts (rehearsals do not nest: the first was closed)
        assert torch.cuda.is_available()
