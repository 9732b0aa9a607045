"""After CALLBACKS_BOUND, Megatron-LM's `train()` binds the scheduler callbacks again; the drop-in's
`bound_once` makes that second binding a no-op on megatron's real TransformerConfig, in one
process: each write that would put back what a slot holds is dropped and named, `train()`'s check
that `no_sync_func` is unset and its one-element list read back as under Megatron-LM, a different
callable is refused naming both, `train_step`'s pause of `param_sync_func` goes through. A
script's own write (a wrapper of the finalizer) goes through, is reported with its writer, and is
undone when `train()` raises, so that the release unbinds the lifecycle's callback.

`train()`'s binding lines are replayed by functions whose module is `megatron.training.training`
(what `bound_once` tells `train()`'s writes by): the real `train()` needs ranks and a model
(tests/integration/test_megatron_lm.py runs it). The model chunks and the optimizer are objects
with the methods `train()` binds (bound methods compare by owner and function, as DDP's do)."""

from __future__ import annotations

import functools
import textwrap
from typing import Any

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

from megatron.core.transformer import TransformerConfig

from lifecycle.errors import BindingError
from lifecycle.testing import bound_once, slot_value_text

TRAIN: dict[str, Any] = {"__name__": "megatron.training.training"}
exec(  # train()'s own lines, run as its module
    textwrap.dedent(
        '''
        def bind(config, model, optimizer, finalize, *, overlap_grad=True, align_grad=True, overlap_param=True):
            """train()'s binding ("Setup some training config params"), line for line."""
            config.grad_scale_func = optimizer.scale_loss if optimizer is not None else None
            if overlap_grad:
                assert config.no_sync_func is None, "a custom no_sync_func is not supported"
                config.no_sync_func = [chunk.no_sync for chunk in model]
                if len(model) == 1:
                    config.no_sync_func = config.no_sync_func[0]
                if align_grad:
                    config.grad_sync_func = [chunk.start_grad_sync for chunk in model]
                    if len(model) == 1:
                        config.grad_sync_func = config.grad_sync_func[0]
            if overlap_param:
                config.param_sync_func = [chunk.start_param_sync for chunk in model]
                if len(model) == 1:
                    config.param_sync_func = config.param_sync_func[0]
            if config.finalize_model_grads_func is None:
                config.finalize_model_grads_func = finalize

        def write(config, name, value):
            """A write of train()'s (train_step's pause of param_sync_func and its resume)."""
            setattr(config, name, value)
        '''
    ),
    TRAIN,
)
SLOTS = ["grad_scale_func", "no_sync_func", "grad_sync_func", "param_sync_func"]


class Chunk:
    def no_sync(self) -> None: ...
    def start_grad_sync(self) -> None: ...
    def start_param_sync(self) -> None: ...


class Optimizer:
    def scale_loss(self, loss: float) -> float:
        return loss


def finalize_model_grads(*_: object) -> None: ...


def config() -> TransformerConfig:
    return TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=2)


def bound(model: list[Chunk], optimizer: Optimizer, **only: bool) -> TransformerConfig:
    """A config as CALLBACKS_BOUND leaves it: train()'s binding made by the lifecycle, before train()."""
    c = config()
    TRAIN["bind"](c, model, optimizer, finalize_model_grads, **only)
    return c


def values(c: TransformerConfig) -> list[object]:
    return [getattr(c, slot) for slot in [*SLOTS, "finalize_model_grads_func"]]


@pytest.mark.parametrize("chunks", [1, 2])
def test_trains_second_binding_is_dropped_slot_by_slot_and_the_lifecycles_stays(chunks: int) -> None:
    model, optimizer = [Chunk() for _ in range(chunks)], Optimizer()
    c = bound(model, optimizer)
    before = values(c)
    with bound_once(c) as dropped:
        TRAIN["bind"](c, model, optimizer, finalize_model_grads)
        assert c.num_layers == 1  # every other attribute reads as before
    assert dropped == SLOTS
    assert values(c) == before
    assert c.no_sync_func == (model[0].no_sync if chunks == 1 else [m.no_sync for m in model])
    assert type(c) is TransformerConfig


def test_with_only_no_sync_bound_trains_check_that_it_is_unset_still_passes() -> None:
    model, optimizer = [Chunk()], Optimizer()
    c = bound(model, optimizer, align_grad=False, overlap_param=False)
    with bound_once(c) as dropped:
        TRAIN["bind"](c, model, optimizer, finalize_model_grads, align_grad=False, overlap_param=False)
    assert dropped == ["grad_scale_func", "no_sync_func"]
    assert c.no_sync_func == model[0].no_sync and c.grad_sync_func is None


def test_on_an_unbound_config_trains_binding_goes_through_as_under_megatron_lm() -> None:
    model, optimizer = [Chunk()], Optimizer()
    c = config()
    with bound_once(c) as dropped:
        TRAIN["bind"](c, model, optimizer, finalize_model_grads)
    assert dropped == []
    assert values(c) == values(bound(model, optimizer))


def test_train_steps_pause_of_param_sync_goes_through_and_its_resume_restores_it() -> None:
    model, optimizer = [Chunk()], Optimizer()
    c = bound(model, optimizer)
    with bound_once(c) as dropped:
        TRAIN["bind"](c, model, optimizer, finalize_model_grads)
        TRAIN["write"](c, "param_sync_func", None)
        assert c.param_sync_func is None
        TRAIN["write"](c, "param_sync_func", model[0].start_param_sync)
        TRAIN["write"](c, "timers", "train()'s timers")  # not a callback slot: goes through
    assert c.param_sync_func == model[0].start_param_sync and c.timers == "train()'s timers"
    assert dropped == SLOTS


def test_a_different_callable_from_train_is_refused_naming_both() -> None:
    model = [Chunk()]
    c = bound(model, Optimizer())
    with pytest.raises(BindingError) as caught, bound_once(c):
        TRAIN["bind"](c, model, Optimizer(), finalize_model_grads)  # another optimizer's scale_loss: same name
    assert caught.value.state == "CALLBACKS_BOUND"
    assert str(caught.value).startswith(
        "Megatron-LM's train() would bind grad_scale_func to Optimizer.scale_loss but the lifecycle bound "
        "Optimizer.scale_loss; the binding does not match Megatron-LM's, report it"
    )
    assert type(c) is TransformerConfig
    TRAIN["write"](c, "grad_scale_func", None)  # after the block nothing is watched
    assert c.grad_scale_func is None


def test_a_binding_for_another_number_of_chunks_is_refused() -> None:
    model = [Chunk(), Chunk()]
    c = bound(model, Optimizer())
    three = r"bind no_sync_func to \[Chunk.no_sync, Chunk.no_sync, Chunk.no_sync\] but"
    with pytest.raises(BindingError, match=three), bound_once(c):
        TRAIN["bind"](c, [*model, Chunk()], None, finalize_model_grads)


def wrap_the_finalizer(c: TransformerConfig, wrapper: object) -> None:
    c.finalize_model_grads_func = wrapper


def test_a_scripts_own_write_goes_through_is_reported_and_stays_when_train_returns() -> None:
    model, optimizer = [Chunk()], Optimizer()
    c = bound(model, optimizer)
    seen: list[tuple[str, object, object, str]] = []
    wrapper = functools.partial(finalize_model_grads, "profiled")
    with bound_once(c, lambda *report: seen.append(report)):
        wrap_the_finalizer(c, wrapper)
        c.no_sync_func = model[0].start_grad_sync  # over train()'s pending view: read back as written
        assert c.no_sync_func == model[0].start_grad_sync
        TRAIN["bind"](c, model, optimizer, finalize_model_grads, overlap_grad=False)
    assert c.finalize_model_grads_func is wrapper
    [(slot, was, now, writer), (slot2, *_)] = seen
    assert (slot, was, now, slot2) == ("finalize_model_grads_func", finalize_model_grads, wrapper, "no_sync_func")
    assert writer.endswith("test_lm_dropin_train_binds_the_callbacks_once:wrap_the_finalizer")


def test_when_train_raises_a_scripts_writes_are_undone_so_the_release_finds_the_lifecycles_callbacks() -> None:
    model, optimizer = [Chunk()], Optimizer()
    c = bound(model, optimizer)
    with pytest.raises(RuntimeError, match="step 3 failed"), bound_once(c):
        wrap_the_finalizer(c, functools.partial(finalize_model_grads, 1))
        wrap_the_finalizer(c, functools.partial(finalize_model_grads, 2))
        c.grad_sync_func = None
        raise RuntimeError("step 3 failed")
    assert c.finalize_model_grads_func is finalize_model_grads and c.grad_sync_func == model[0].start_grad_sync
    assert type(c) is TransformerConfig


def test_when_train_raises_a_slot_written_again_since_the_script_is_left_as_it_is() -> None:
    model, optimizer = [Chunk()], Optimizer()
    c = bound(model, optimizer)
    with pytest.raises(RuntimeError), bound_once(c):
        wrap_the_finalizer(c, functools.partial(finalize_model_grads, 1))
        TRAIN["write"](c, "finalize_model_grads_func", None)
        raise RuntimeError
    assert c.finalize_model_grads_func is None


def test_a_slot_value_is_named_by_its_functions_never_a_repr() -> None:
    chunk = Chunk()
    assert slot_value_text(finalize_model_grads) == "finalize_model_grads"
    assert slot_value_text(chunk.no_sync) == "Chunk.no_sync"
    assert slot_value_text(functools.partial(finalize_model_grads, 1)) == "partial(finalize_model_grads)"
    assert slot_value_text([chunk.no_sync, chunk.start_grad_sync]) == "[Chunk.no_sync, Chunk.start_grad_sync]"
    assert slot_value_text([chunk.no_sync]) == "[Chunk.no_sync]"
    assert slot_value_text(len) == "len"
    assert slot_value_text(Optimizer()) == "Optimizer"
    assert slot_value_text(None) == "None"
