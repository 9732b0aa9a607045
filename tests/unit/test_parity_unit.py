"""Megatron-LM parity at the edges, without megatron: config normalization as Megatron-LM's
arguments.py does it, and unbinding what the interleaved schedule made of a bound callable."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import pytest

from bindings import BindingReport, pause_param_sync, resume_param_sync, unbind_callbacks
from lifecycle import RunConfig
from lifecycle.config import normalize, validate
from lifecycle.errors import BindingError
from lifecycle.testing import DDPConfig, install


def _config(*overrides: str) -> RunConfig:
    return RunConfig.preset("tiny-gpt", list(overrides))


def test_vpp_one_is_normalized_to_no_virtual_pipeline_with_the_reason() -> None:
    used, [rewrite] = normalize(_config("parallel.pp=2", "parallel.vpp=1"))
    assert used.parallel.vpp is None and used.parallel.pp == 2
    assert (rewrite.field, rewrite.given, rewrite.used) == ("parallel.vpp", 1, None)
    assert "arguments.py" in rewrite.why
    assert rewrite.log_fields() == {"field": "parallel.vpp", "given": 1, "used": None, "why": rewrite.why}


def test_a_normalized_vpp_one_validates_even_with_fewer_microbatches_than_stages() -> None:
    used, _ = normalize(
        _config("parallel.pp=2", "parallel.vpp=1", "training.num_microbatches=1", "parallel.world_size=2")
    )
    assert validate(used, environment=False) == []


def test_align_param_gather_defaults_on_as_in_megatron_lm() -> None:
    assert DDPConfig().align_param_gather is True


def test_aligned_overlapped_param_gather_without_virtual_pipeline_is_turned_off() -> None:
    config = _config(
        "ddp.use_distributed_optimizer=true", "ddp.overlap_grad_reduce=true", "ddp.overlap_param_gather=true"
    )
    used, [rewrite] = normalize(config)
    assert used.ddp.align_param_gather is False
    assert (rewrite.field, rewrite.given, rewrite.used) == ("ddp.align_param_gather", True, False)


def test_vpp_one_with_aligned_gather_reports_both_rewrites_in_order() -> None:
    config = _config(
        "parallel.pp=2",
        "parallel.vpp=1",
        "ddp.use_distributed_optimizer=true",
        "ddp.overlap_grad_reduce=true",
        "ddp.overlap_param_gather=true",
    )
    _, rewrites = normalize(config)
    assert [r.field for r in rewrites] == ["parallel.vpp", "ddp.align_param_gather"]


@pytest.mark.parametrize(
    "overrides",
    [
        (),
        (
            "parallel.pp=2",
            "parallel.vpp=2",
            "model.num_layers=4",
            "ddp.use_distributed_optimizer=true",
            "ddp.overlap_grad_reduce=true",
            "ddp.overlap_param_gather=true",
        ),
    ],
)
def test_a_config_megatron_lm_runs_as_given_is_returned_unchanged(overrides: tuple[str, ...]) -> None:
    config = _config(*overrides)
    used, rewrites = normalize(config)
    assert used is config and rewrites == ()


@dataclass
class Target:
    finalize_model_grads_func: Any = None
    grad_scale_func: Any = None
    no_sync_func: Any = None
    grad_sync_func: Any = None
    param_sync_func: Any = None


def ours(*args: Any) -> None:
    """A callback the binding installs."""


def users(*args: Any) -> None:
    """Another writer's callback."""


def _bound(target: Target, plan: dict[str, Any]) -> BindingReport:
    installed = install(target, plan).installed
    return BindingReport(
        target_type="Target",
        target_id=hex(id(target)),
        scheduler_config_id=hex(id(target)),
        provider_config_id=None,
        copied=False,
        slots=tuple(installed),
        chunks=1,
        optimizer=True,
        overlap_grad_reduce=True,
        overlap_param_gather=True,
        align_grad_reduce=True,
        align_param_gather=True,
        target_ref=weakref.ref(target),
        installed_ids=MappingProxyType({s: id(v) for s, v in installed.items()}),
    )


def test_unbinding_clears_a_list_the_schedule_made_from_the_bound_callable() -> None:
    target = Target()
    report = _bound(target, {"grad_sync_func": ours, "param_sync_func": ours})
    target.grad_sync_func = [target.grad_sync_func]  # what the interleaved schedule does
    target.param_sync_func = [ours, users]  # a list holding another writer's callable is not ours
    assert unbind_callbacks(report) == ("grad_sync_func",)
    assert target.grad_sync_func is None and target.param_sync_func == [ours, users]


class Sticky(Target):
    """A config class whose setattr refuses to clear grad_sync_func."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "grad_sync_func" and value is None and getattr(self, name, None) is not None:
            return
        super().__setattr__(name, value)


def test_unbinding_verifies_and_names_a_slot_that_could_not_be_cleared() -> None:
    target = Sticky()
    report = _bound(target, {"grad_sync_func": ours})
    with pytest.raises(BindingError, match=r"\['grad_sync_func'\] still hold"):
        unbind_callbacks(report)


def test_pausing_param_sync_takes_it_off_and_resuming_puts_the_same_object_back() -> None:
    target = Target()
    entries = [ours, ours]
    report = _bound(target, {"param_sync_func": entries})
    paused = pause_param_sync(report)
    assert paused is entries and target.param_sync_func is None
    resume_param_sync(report, paused)
    assert target.param_sync_func is entries


def test_resuming_does_not_overwrite_what_another_writer_bound_meanwhile() -> None:
    target = Target()
    report = _bound(target, {"param_sync_func": ours})
    paused = pause_param_sync(report)
    target.param_sync_func = users
    resume_param_sync(report, paused)
    assert target.param_sync_func is users
