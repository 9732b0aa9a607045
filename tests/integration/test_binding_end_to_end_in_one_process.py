"""`bind_callbacks` end to end in one process: the real `get_model_config` and `finalize_model_grads`
of megatron-core, chunks that wrap their module the way megatron's DDP does (`.module`, `no_sync`,
`start_grad_sync`, `start_param_sync`), no process group. Checks every branch of the contract and of
the verification, including the ones the 2-rank tests in test_bindings.py never reach: a config
that rewrites what was installed, chunks with configs of their own, per-chunk lists in conflict.

Written to kill the mutants scripts/mutation makes of bindings/.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import weakref
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from bindings import BindingReport, CountingFinalizer, bind_callbacks, unbind_callbacks
from lifecycle.errors import BindingConflict, BindingError
from lifecycle.testing import SLOTS


@dataclass
class Config:
    """The callback fields of megatron's TransformerConfig."""

    finalize_model_grads_func: Any = None
    grad_scale_func: Any = None
    no_sync_func: Any = None
    grad_sync_func: Any = None
    param_sync_func: Any = None


class Module:
    def __init__(self, config: Config) -> None:
        self.config = config


class Wrapped:
    """A chunk as megatron's DDP wraps it: the config is found through `.module`."""

    def __init__(self, config: Config) -> None:
        self.module = Module(config)

    def no_sync(self) -> None: ...

    def start_grad_sync(self) -> None: ...

    def start_param_sync(self) -> None: ...


class Optimizer:
    def scale_loss(self, loss: Any) -> Any:
        return loss


def ddp(*, grad: bool = False, param: bool = False, align_param: bool = False, **extra: Any) -> SimpleNamespace:
    return SimpleNamespace(
        overlap_grad_reduce=grad, overlap_param_gather=param, align_param_gather=align_param, **extra
    )


def test_binding_targets_the_first_chunks_config_when_each_chunk_holds_its_own_copy() -> None:
    configs = [Config(), Config()]
    model = [Wrapped(c) for c in configs]
    report = bind_callbacks(model, Optimizer(), ddp(grad=True))
    assert isinstance(configs[0].finalize_model_grads_func, CountingFinalizer)
    assert configs[0].no_sync_func == [model[0].no_sync, model[1].no_sync]
    assert configs[1] == Config()
    assert report.target_id == report.scheduler_config_id == hex(id(configs[0]))
    assert report.target() is configs[0] and report.chunks == 2


def test_an_empty_model_is_refused_before_anything_is_bound() -> None:
    with pytest.raises(BindingError, match="model is an empty list; build the model before binding") as info:
        bind_callbacks([], Optimizer(), ddp())
    assert info.value.chunks == 0


def test_a_config_that_rewrites_an_installed_callback_is_caught_naming_the_slot() -> None:
    @dataclass
    class Rewriting(Config):
        def __setattr__(self, name: str, value: Any) -> None:
            wrapped = functools.partial(value) if name == "grad_scale_func" and value is not None else value
            object.__setattr__(self, name, wrapped)

    with pytest.raises(BindingError, match=r"slots \['grad_scale_func'\] do not hold the installed callbacks") as info:
        bind_callbacks([Wrapped(Rewriting())], Optimizer(), ddp())
    assert info.value.slots == ["grad_scale_func"]


class Copies:
    """A module whose `config` property gives a fresh copy on each read (a config rebuilt on access)."""

    def __init__(self, config: Config) -> None:
        self._config = config

    @property
    def config(self) -> Config:
        return dataclasses.replace(self._config)


def test_a_chunk_whose_config_is_a_fresh_copy_on_each_read_is_refused_naming_both_objects() -> None:
    """What the callbacks were written to is not what the scheduler reads next: the identity check says
    so, before the slot check (which would blame the config class for rewriting them)."""
    kept = Config()
    chunk = SimpleNamespace(module=Copies(kept))
    with pytest.raises(
        BindingError, match=r"^the scheduler reads Config at 0x[0-9a-f]+ but the callbacks went to"
    ) as info:
        bind_callbacks([chunk], Optimizer(), ddp())
    assert str(info.value).endswith("; bind to get_model_config(model[0])")
    assert info.value.scheduler_config_id != info.value.target_id
    assert f"at {info.value.scheduler_config_id} but" in str(info.value)
    assert str(info.value).split("went to ")[1].startswith(info.value.target_id)
    assert kept == Config(), "nothing reached the config the copies are made from"


def test_the_report_says_what_was_bound_and_how() -> None:
    config, provider_config = Config(), Config()
    report = bind_callbacks(
        [Wrapped(config)], Optimizer(), ddp(grad=True, param=True, align_param=True), provider_config=provider_config
    )
    assert report.slots == SLOTS
    assert report.copied and report.provider_config_id == hex(id(provider_config))
    assert report.optimizer and report.overlap_grad_reduce and report.overlap_param_gather
    assert report.align_grad_reduce and report.align_param_gather
    assert report.target_type == "Config" and report.policy is None
    assert report.watchdog is not None and report.watchdog.finalizer is config.finalize_model_grads_func


def test_binding_to_the_providers_own_config_is_not_a_copy() -> None:
    config = Config()
    report = bind_callbacks([Wrapped(config)], Optimizer(), ddp(), provider_config=config)
    assert not report.copied and report.provider_config_id == hex(id(config))
    unknown = bind_callbacks([Wrapped(Config())], Optimizer(), ddp())
    assert not unknown.copied and unknown.provider_config_id is None


def test_without_an_optimizer_no_finalizer_or_scale_is_bound_and_no_watchdog_armed() -> None:
    config = Config()
    report = bind_callbacks([Wrapped(config)], None, ddp(grad=True))
    assert report.slots == ("no_sync_func", "grad_sync_func")
    assert not report.optimizer and report.watchdog is None
    assert config.finalize_model_grads_func is None and config.grad_scale_func is None


def test_without_overlap_only_the_finalizer_and_the_loss_scale_are_bound() -> None:
    config, optimizer = Config(), Optimizer()
    report = bind_callbacks([Wrapped(config)], optimizer, ddp())
    assert report.slots == ("finalize_model_grads_func", "grad_scale_func")
    assert config.grad_scale_func == optimizer.scale_loss
    assert not report.overlap_grad_reduce and not report.overlap_param_gather


def test_param_sync_is_bound_only_with_both_overlap_and_align_param_gather() -> None:
    for param, align, bound in [(True, True, True), (True, False, False), (False, True, False)]:
        config = Config()
        report = bind_callbacks([Wrapped(config)], Optimizer(), ddp(param=param, align_param=align))
        assert ("param_sync_func" in report.slots) is bound
        assert report.align_param_gather is align


def test_grad_sync_follows_align_grad_reduce_from_the_ddp_config_or_the_override() -> None:
    model = [Wrapped(Config())]
    assert "grad_sync_func" in bind_callbacks(model, None, ddp(grad=True)).slots
    unbind_callbacks(bind_callbacks(model, None, ddp(grad=True), policy="replace"))
    off = bind_callbacks([Wrapped(Config())], None, ddp(grad=True, align_grad_reduce=False))
    assert "grad_sync_func" not in off.slots and not off.align_grad_reduce
    forced = bind_callbacks([Wrapped(Config())], None, ddp(grad=True, align_grad_reduce=False), align_grad_reduce=True)
    assert "grad_sync_func" in forced.slots and forced.align_grad_reduce


def test_a_chunk_without_ddps_sync_methods_is_refused_when_overlap_is_on() -> None:
    class HalfWrapped:
        def __init__(self, config: Config) -> None:
            self.module = Module(config)

        def no_sync(self) -> None: ...

    with pytest.raises(BindingError, match="model chunk 1 is HalfWrapped, not wrapped"):
        bind_callbacks([Wrapped(Config()), HalfWrapped(Config())], None, ddp(grad=True))


def test_the_finalizer_is_megatrons_with_the_process_group_collection_bound() -> None:
    from megatron.core.distributed import finalize_model_grads

    groups = object()
    config = Config()
    bind_callbacks([Wrapped(config)], Optimizer(), ddp(), pg_collection=groups)
    fn = config.finalize_model_grads_func.fn
    assert isinstance(fn, functools.partial)
    assert fn.func is finalize_model_grads and fn.keywords == {"pg_collection": groups}
    plain = Config()
    bind_callbacks([Wrapped(plain)], Optimizer(), ddp())
    assert plain.finalize_model_grads_func.fn is finalize_model_grads


def test_a_user_per_chunk_list_is_a_conflict_unless_it_is_the_same_list() -> None:
    model = [Wrapped(Config()), Wrapped(Config())]
    config = model[0].module.config
    config.no_sync_func = [model[0].no_sync, model[0].no_sync]
    with pytest.raises(BindingConflict) as info:
        bind_callbacks(model, None, ddp(grad=True))
    assert info.value.slot == "no_sync_func"
    config.no_sync_func = [model[0].no_sync]
    with pytest.raises(BindingConflict):
        bind_callbacks(model, None, ddp(grad=True))
    config.no_sync_func = [model[0].no_sync, model[1].no_sync]
    config.grad_sync_func = [model[0].start_grad_sync, model[1].start_grad_sync]
    report = bind_callbacks(model, None, ddp(grad=True))
    assert report.slots == ("no_sync_func", "grad_sync_func") and report.kept == report.replaced == ()


def test_keep_leaves_the_users_list_in_place_and_does_not_claim_it() -> None:
    model = [Wrapped(Config()), Wrapped(Config())]
    config = model[0].module.config
    users = [model[1].no_sync, model[0].no_sync]
    config.no_sync_func = users
    report = bind_callbacks(model, None, ddp(grad=True), policy="keep")
    assert config.no_sync_func is users and report.kept == ("no_sync_func",)
    assert "no_sync_func" not in report.slots
    assert unbind_callbacks(report) == ("grad_sync_func",)
    assert config.no_sync_func is users


def test_unbinding_frees_the_model_and_optimizer_the_config_referenced() -> None:
    config, optimizer = Config(), Optimizer()
    model = [Wrapped(config)]
    report = bind_callbacks(model, optimizer, ddp(grad=True))
    dead_model, dead_optimizer = weakref.ref(model[0]), weakref.ref(optimizer)
    assert set(unbind_callbacks(report)) == {
        "finalize_model_grads_func",
        "grad_scale_func",
        "no_sync_func",
        "grad_sync_func",
    }
    del model, optimizer
    gc.collect()
    assert dead_model() is None and dead_optimizer() is None
    assert config == Config()


def test_reports_compare_by_what_was_bound_not_by_their_live_references() -> None:
    first = bind_callbacks([Wrapped(Config())], Optimizer(), ddp())
    second = bind_callbacks([Wrapped(Config())], Optimizer(), ddp())
    same = BindingReport(
        **{
            **{f: getattr(first, f) for f in first.__dataclass_fields__},
            "watchdog": second.watchdog,
            "target_ref": second.target_ref,
            "installed_ids": second.installed_ids,
        }
    )
    assert same.installed_ids != first.installed_ids
    assert same == first
    shown = set(repr(first).replace("(", " ").replace("=", " ").split())
    assert not {"watchdog", "target_ref", "installed_ids"} & shown


def test_a_ddp_config_without_the_overlap_fields_binds_no_sync_slot() -> None:
    config = Config()
    report = bind_callbacks([Wrapped(config)], Optimizer(), SimpleNamespace(overlap_param_gather=True))
    assert report.slots == ("finalize_model_grads_func", "grad_scale_func")
    bare = bind_callbacks([Wrapped(Config())], Optimizer(), SimpleNamespace())
    assert not (bare.overlap_grad_reduce or bare.overlap_param_gather or bare.align_param_gather)


def test_a_one_chunk_model_whose_config_holds_its_own_sync_method_is_not_a_conflict() -> None:
    model = [Wrapped(Config())]
    model[0].module.config.no_sync_func = model[0].no_sync  # an equal bound method, not the same object
    report = bind_callbacks(model, None, ddp(grad=True))
    assert report.slots == ("no_sync_func", "grad_sync_func") and report.kept == report.replaced == ()


def test_a_one_chunk_model_whose_config_holds_a_list_is_a_conflict() -> None:
    model = [Wrapped(Config())]
    model[0].module.config.no_sync_func = [model[0].no_sync]
    with pytest.raises(BindingConflict):
        bind_callbacks(model, None, ddp(grad=True))


def test_binding_options_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        bind_callbacks([Wrapped(Config())], Optimizer(), ddp(), Config())  # type: ignore[misc]


def test_a_report_cannot_be_changed_after_binding() -> None:
    import dataclasses

    report = bind_callbacks([Wrapped(Config())], Optimizer(), ddp())
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.copied = True  # type: ignore[misc]


def test_a_users_single_callable_in_a_sync_slot_of_a_several_chunk_model_is_a_conflict() -> None:
    model = [Wrapped(Config()), Wrapped(Config())]
    model[0].module.config.no_sync_func = model[0].no_sync
    with pytest.raises(BindingConflict) as info:
        bind_callbacks(model, None, ddp(grad=True))
    assert info.value.slot == "no_sync_func"
