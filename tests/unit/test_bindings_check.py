"""`bindings.check`'s judgement and the first-step guard, without megatron.

Chunks here are objects with megatron DDP's method names; the configs, any object with the
scheduler's slots. The integration tests (test_check_binding.py) run real megatron bindings.
"""

from __future__ import annotations

import functools
import pickle
from dataclasses import dataclass
from typing import Any

import pytest

from bindings import (
    CheckReport,
    CountingFinalizer,
    SlotCheck,
    check_config,
    describe_slot,
    guard_config,
    inspect_slots,
    judge_slot,
    model_chunks,
    reachable_configs,
    scale_owner,
    sources,
    unwrap_finalizer,
)
from lifecycle.errors import BindingError, FinalizerNotCalled
from lifecycle.testing import FIRST_STEP_FINALIZED, FIRST_STEP_NOT_FINALIZED, SLOTS, FirstStepGuard


@dataclass
class Config:
    finalize_model_grads_func: Any = None
    grad_scale_func: Any = None
    no_sync_func: Any = None
    grad_sync_func: Any = None
    param_sync_func: Any = None


@dataclass
class DDP:
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    align_param_gather: bool = False


class Chunk:
    def __init__(self, config: Config | None = None, module: Any = None) -> None:
        self.config, self.module = config, module

    def no_sync(self) -> None: ...
    def start_grad_sync(self) -> None: ...
    def start_param_sync(self) -> None: ...


class Optimizer:
    def __init__(self) -> None:
        self.steps = 0

    def scale_loss(self, loss: Any) -> Any:
        return loss

    def step(self) -> tuple[bool, None, None]:
        self.steps += 1
        return True, None, None


def finalize_model_grads(model: Any, num_tokens: Any = None, pg_collection: Any = None) -> None:
    """Stands for megatron's function; `judge_slot` compares by identity."""


ALL = DDP(overlap_grad_reduce=True, overlap_param_gather=True, align_param_gather=True)


def bound(chunks: list[Chunk], optimizer: Optimizer, ddp: DDP = ALL) -> Config:
    """A config bound as the rules say, by hand."""

    def entry(name: str) -> Any:
        methods = [getattr(c, name) for c in chunks]
        return methods[0] if len(methods) == 1 else methods

    config = Config(finalize_model_grads_func=finalize_model_grads, grad_scale_func=optimizer.scale_loss)
    wanted = sources(ddp, optimizer=True)
    for slot in ("no_sync_func", "grad_sync_func", "param_sync_func"):
        if slot in wanted:
            setattr(config, slot, entry(wanted[slot]))
    return config


def report_for(config: Config, chunks: list[Chunk], optimizer: Any, ddp: DDP = ALL, **kw: Any) -> CheckReport:
    return inspect_slots(
        config, chunks, sources(ddp, optimizer=True), optimizer=optimizer, finalizer=finalize_model_grads, **kw
    )


@pytest.mark.parametrize("n", [1, 2])
def test_a_binding_made_by_the_rules_is_ok_for_one_and_several_chunks(n: int) -> None:
    chunks, opt = [Chunk() for _ in range(n)], Optimizer()
    report = report_for(bound(chunks, opt), chunks, opt)
    assert report.verdict == "ok" and report.bad == ()
    assert [s.slot for s in report.slots] == list(SLOTS)
    report.raise_if_bad()


def test_the_rules_ask_for_each_sync_slot_only_with_its_ddp_settings() -> None:
    assert list(sources(DDP(), optimizer=True)) == ["finalize_model_grads_func", "grad_scale_func"]
    assert sources(DDP(), optimizer=False) == {}
    ogr = sources(DDP(overlap_grad_reduce=True), optimizer=False)
    assert ogr == {"no_sync_func": "no_sync", "grad_sync_func": "start_grad_sync"}
    assert sources(DDP(overlap_grad_reduce=True), optimizer=False, align_grad_reduce=False) == {
        "no_sync_func": "no_sync"
    }
    assert sources(DDP(overlap_param_gather=True), optimizer=False) == {}
    assert sources(DDP(overlap_param_gather=True, align_param_gather=True), optimizer=False) == {
        "param_sync_func": "start_param_sync"
    }


def test_wrapped_finalizers_are_megatrons_finalizer() -> None:
    chunks, opt = [Chunk()], Optimizer()
    for wrapped in (
        CountingFinalizer(functools.partial(finalize_model_grads, pg_collection=None)),
        functools.wraps(finalize_model_grads)(lambda *a: None),
    ):
        assert unwrap_finalizer(wrapped) is finalize_model_grads
        config = bound(chunks, opt)
        config.finalize_model_grads_func = wrapped
        assert report_for(config, chunks, opt).verdict == "ok"


@pytest.mark.parametrize("slot", SLOTS)
def test_a_missing_slot_is_missing_and_names_where_it_was_set_instead(slot: str) -> None:
    chunks, opt = [Chunk()], Optimizer()
    provider = bound(chunks, opt)
    config = bound(chunks, opt)
    setattr(config, slot, None)
    report = report_for(config, chunks, opt, others=[(provider, "provider config"), (config, "self")])
    assert report.verdict == "missing" and [s.slot for s in report.bad] == [slot]
    where = report.slot(slot).elsewhere
    assert where == (f"Config at {hex(id(provider))} (provider config)",)
    with pytest.raises(BindingError) as info:
        report.raise_if_bad()
    message = str(info.value)
    assert info.value.slot == slot and info.value.verdict == "missing"
    assert hex(id(provider)) in message and report.scheduler_config_id in message
    assert "get_model_config(model[0])" in message and "never reads" in message


@pytest.mark.parametrize("slot", SLOTS)
@pytest.mark.parametrize("n", [1, 2])
def test_a_foreign_callable_in_any_slot_is_wrong(slot: str, n: int) -> None:
    chunks, opt = [Chunk() for _ in range(n)], Optimizer()
    config = bound(chunks, opt)
    setattr(config, slot, print)
    report = report_for(config, chunks, opt)
    assert {s.slot: s.verdict for s in report.bad} == {slot: "wrong"}
    assert report.slot(slot).found == "print"


def test_a_slot_the_rules_do_not_ask_for_must_be_empty() -> None:
    chunks, opt = [Chunk()], Optimizer()
    config = bound(chunks, opt, DDP())
    config.no_sync_func = chunks[0].no_sync
    report = report_for(config, chunks, opt, DDP())
    assert report.slot("no_sync_func").verdict == "wrong"
    assert report.slot("no_sync_func").expected == "nothing"


def test_a_single_chunk_callable_in_a_list_or_the_chunks_in_another_order_is_wrong() -> None:
    chunks, opt = [Chunk(), Chunk()], Optimizer()
    config = bound(chunks, opt)
    config.no_sync_func = [chunks[1].no_sync, chunks[0].no_sync]
    config.grad_sync_func = chunks[0].start_grad_sync
    report = report_for(config, chunks, opt)
    assert {s.slot: s.verdict for s in report.bad} == {"no_sync_func": "wrong", "grad_sync_func": "wrong"}
    one = [Chunk()]
    config = bound(one, opt)
    config.no_sync_func = [one[0].no_sync]
    assert report_for(config, one, opt).slot("no_sync_func").verdict == "wrong"


def test_methods_of_chunks_and_an_optimizer_of_a_previous_build_are_stale() -> None:
    old, opt_old = [Chunk()], Optimizer()
    config = bound(old, opt_old)
    new, opt_new = [Chunk()], Optimizer()
    report = report_for(config, new, opt_new)
    assert report.verdict == "stale"
    assert {s.slot: s.verdict for s in report.bad} == {
        "grad_scale_func": "stale",
        "no_sync_func": "stale",
        "grad_sync_func": "stale",
        "param_sync_func": "stale",
    }
    with pytest.raises(BindingError, match="rebind after the rebuild"):
        report.raise_if_bad()
    assert report_for(config, old, opt_old).verdict == "ok"


def test_a_stale_entry_in_a_slot_not_asked_for_is_stale_and_stale_wins_the_report() -> None:
    old, new, opt = [Chunk()], [Chunk()], Optimizer()
    config = bound(new, opt, DDP())
    config.no_sync_func = old[0].no_sync
    config.finalize_model_grads_func = None
    report = report_for(config, new, opt, DDP())
    assert report.slot("no_sync_func").verdict == "stale"
    assert report.verdict == "stale"
    with pytest.raises(BindingError) as info:
        report.raise_if_bad()
    assert info.value.slot == "no_sync_func" and "finalize_model_grads_func" in str(info.value)


def test_scale_loss_of_another_kind_of_object_or_a_plain_function_is_wrong() -> None:
    chunks, opt = [Chunk()], Optimizer()

    class Other:
        def scale_loss(self, loss: Any) -> Any:
            return loss

    assert judge_slot("scale_loss", Other().scale_loss, chunks, opt, None) == "wrong"
    assert judge_slot("scale_loss", opt.step, chunks, opt, None) == "wrong"
    assert judge_slot("scale_loss", Other().scale_loss, chunks, None, None) == "ok"
    assert judge_slot("scale_loss", lambda loss: loss, chunks, None, None) == "wrong"


def test_a_finalizer_that_is_not_megatrons_is_wrong() -> None:
    assert judge_slot("finalize_model_grads", print, [Chunk()], None, finalize_model_grads) == "wrong"
    assert judge_slot("finalize_model_grads", None, [Chunk()], None, finalize_model_grads) == "missing"


def test_the_report_renders_one_line_per_slot_and_is_frozen_and_picklable() -> None:
    chunks, opt = [Chunk(), Chunk()], Optimizer()
    config = bound(chunks, opt)
    config.finalize_model_grads_func = None
    report = report_for(config, chunks, opt).with_chunk_configs(("0x1", "0x2"), None)
    lines = report.render().splitlines()
    assert lines[0].startswith("binding check: missing (scheduler config Config at ")
    assert "2 chunks" in lines[0] and "chunk configs 0x1 0x2" in lines[0]
    assert len(lines) == 1 + len(SLOTS)
    assert lines[1].split()[:2] == ["finalize_model_grads_func", "missing"]
    assert pickle.loads(pickle.dumps(report)) == report
    with pytest.raises(AttributeError):
        report.chunks = 3  # type: ignore[misc]
    one = report_for(bound([chunks[0]], opt), [chunks[0]], opt)
    assert one.render().splitlines()[0].endswith(", 1 chunk)")


def test_a_slot_check_line_says_where_else_the_callable_was_set() -> None:
    line = SlotCheck(
        slot="grad_scale_func",
        verdict="missing",
        expected="x",
        found="nothing",
        elsewhere=("Config at 0x1 (provider config)",),
    ).line()
    assert "set on Config at 0x1 (provider config), which the scheduler never reads" in line
    with pytest.raises(KeyError):
        CheckReport(scheduler_config_type="C", scheduler_config_id="0x0", chunks=1, slots=()).slot("x")


def test_describe_names_owners_lists_and_wrappers() -> None:
    chunk, opt = Chunk(), Optimizer()
    assert describe_slot(None) == "nothing"
    assert describe_slot(chunk.no_sync) == f"Chunk.no_sync at {hex(id(chunk))}"
    assert describe_slot([chunk.no_sync, opt.scale_loss]).startswith("[Chunk.no_sync at ")
    assert describe_slot(CountingFinalizer(finalize_model_grads)) == "CountingFinalizer(finalize_model_grads)"
    assert describe_slot(finalize_model_grads) == "finalize_model_grads"


def test_configs_are_found_through_wrappers_submodules_and_the_provider() -> None:
    inner, provider, scheduler = Config(), Config(), Config()

    class Module:
        def __init__(self, config: Config, subs: dict[str, Any]) -> None:
            self.config, self.subs = config, subs

        def named_modules(self) -> list[tuple[str, Any]]:
            return [("", self), *self.subs.items()]

    layer = Module(inner, {})
    model = Module(scheduler, {"decoder.layers.0": layer, "decoder.layers.1": Module(inner, {})})
    chunk = Chunk(config=scheduler, module=model)
    found = reachable_configs([chunk], provider)
    assert [(id(c), w) for c, w in found] == [
        (id(provider), "provider config"),
        (id(scheduler), "chunk 0.config"),
        (id(inner), "chunk 0.module.decoder.layers.0.config"),
    ]
    assert reachable_configs([Chunk(config=None)], None) == []


def test_the_guard_passes_a_step_that_finalizes_once_and_takes_its_wrappers_off() -> None:
    opt, events = Optimizer(), []
    config = Config(finalize_model_grads_func=finalize_model_grads)
    guard = FirstStepGuard(config, opt, emit=lambda e, **f: events.append((e, f)))
    assert config.finalize_model_grads_func is not finalize_model_grads and "step" in vars(opt)
    config.finalize_model_grads_func([])
    assert opt.step() == (True, None, None) and opt.steps == 1
    assert events == [(FIRST_STEP_FINALIZED, {"finalizer_calls": 1, "step": 1})]
    assert config.finalize_model_grads_func is finalize_model_grads and "step" not in vars(opt)
    assert not guard.armed and guard.after_step() is None


def test_the_guard_raises_before_the_optimizer_steps_when_nothing_finalized() -> None:
    opt, events = Optimizer(), []
    config = Config()
    FirstStepGuard(config, opt, emit=lambda e, **f: events.append(e))
    with pytest.raises(FinalizerNotCalled) as info:
        opt.step()
    assert info.value.finalizer_calls == 0 and info.value.step == 1 and opt.steps == 0
    assert "has no finalize_model_grads_func" in str(info.value)
    assert events == [FIRST_STEP_NOT_FINALIZED] and "step" not in vars(opt)


def test_the_guard_counts_per_step_skips_forward_only_and_catches_finalizing_twice() -> None:
    config = Config(finalize_model_grads_func=finalize_model_grads)
    guard = FirstStepGuard(config, None, steps=3, emit=lambda e, **f: None)
    config.finalize_model_grads_func([])
    assert guard.after_step() == 1
    assert guard.after_step(forward_only=True) is None
    config.finalize_model_grads_func([])
    assert guard.after_step() == 1 and guard.armed
    config.finalize_model_grads_func([])
    config.finalize_model_grads_func([])
    with pytest.raises(FinalizerNotCalled, match="2 times") as info:
        guard.after_step()
    assert (info.value.finalizer_calls, info.value.step) == (2, 3)
    assert config.finalize_model_grads_func is finalize_model_grads


def test_a_finalizer_bound_after_arming_is_counted_from_the_next_step() -> None:
    config = Config(finalize_model_grads_func=print)
    guard = FirstStepGuard(config, None, steps=1, emit=lambda e, **f: None)
    config.finalize_model_grads_func = finalize_model_grads  # Megatron-LM's train() binds anew
    assert guard.after_step() is None and guard.armed
    with pytest.raises(FinalizerNotCalled, match="did not run"):
        guard.after_step()


def test_the_guard_puts_back_an_instance_step_and_refuses_zero_steps() -> None:
    opt = Optimizer()
    own = opt.step
    opt.step = own  # type: ignore[method-assign]
    with FirstStepGuard(Config(), opt):
        assert opt.step is not own
    assert vars(opt)["step"] is own
    with pytest.raises(ValueError, match="steps=0"):
        FirstStepGuard(Config(), None, steps=0)


def test_the_guard_logs_through_python_logging_without_emit(caplog: pytest.LogCaptureFixture) -> None:
    config = Config(finalize_model_grads_func=finalize_model_grads)
    guard = FirstStepGuard(config, None)
    caplog.set_level("INFO", logger="bindings.guard")
    config.finalize_model_grads_func([])
    guard.after_step()
    assert "first_step_finalized finalizer_calls=1 step=1" in caplog.text


def test_the_ddp_config_defaults_to_the_first_chunks_and_an_empty_grad_sync_reads_as_no_align() -> None:
    chunks, opt = [Chunk(), Chunk()], Optimizer()
    chunks[0].ddp_config = DDP(overlap_grad_reduce=True)  # type: ignore[attr-defined]
    config = bound(chunks, opt, DDP(overlap_grad_reduce=True))
    report = check_config(
        config,
        chunks,
        optimizer=opt,
        finalizer=finalize_model_grads,
        chunk_config_ids=("0xa", "0xb"),
        provider_config=config,
    )
    assert report.verdict == "ok" and report.chunk_config_ids == ("0xa", "0xb")
    assert report.provider_config_id == hex(id(config))
    config.grad_sync_func = None  # as bound with align_grad_reduce=False
    assert check_config(config, chunks, optimizer=opt, finalizer=finalize_model_grads).verdict == "ok"
    strict = check_config(config, chunks, optimizer=opt, finalizer=finalize_model_grads, align_grad_reduce=True)
    assert [s.slot for s in strict.bad] == ["grad_sync_func"] and strict.verdict == "missing"
    config.no_sync_func = None
    assert check_config(config, chunks, optimizer=opt, finalizer=finalize_model_grads).verdict == "missing"
    plain = check_config(
        bound(chunks, opt, DDP()), chunks, ddp_config=DDP(), optimizer=opt, finalizer=finalize_model_grads
    )
    assert plain.verdict == "ok"


def test_a_ddp_config_that_carries_align_grad_reduce_is_obeyed() -> None:
    @dataclass
    class LoopDDP(DDP):
        align_grad_reduce: bool = True

    chunks, opt = [Chunk()], Optimizer()
    config = bound(chunks, opt, DDP(overlap_grad_reduce=True))
    config.grad_sync_func = None
    report = check_config(
        config, chunks, ddp_config=LoopDDP(overlap_grad_reduce=True), optimizer=opt, finalizer=finalize_model_grads
    )
    assert report.slot("grad_sync_func").verdict == "missing"


@pytest.mark.parametrize("model", [Chunk(), [], (), None])
def test_anything_but_a_non_empty_list_of_chunks_is_refused(model: Any) -> None:
    with pytest.raises(BindingError, match="not a list of model chunks") as info:
        model_chunks(model)
    empty = isinstance(model, (list, tuple))
    assert ("an empty list" in str(info.value)) is empty
    assert model_chunks((c := Chunk(),)) == [c]


def test_one_bad_slot_names_no_other() -> None:
    chunks, opt = [Chunk()], Optimizer()
    config = bound(chunks, opt)
    config.grad_scale_func = None
    with pytest.raises(BindingError) as info:
        report_for(config, chunks, opt).raise_if_bad()
    assert "also not ok" not in str(info.value)
    config.no_sync_func = None
    with pytest.raises(BindingError, match=r"\(also not ok: no_sync_func\)$"):
        report_for(config, chunks, opt).raise_if_bad()


def test_armed_from_a_config_the_optimizer_is_the_owner_of_grad_scale_func() -> None:
    opt = Optimizer()
    config = Config(finalize_model_grads_func=finalize_model_grads, grad_scale_func=opt.scale_loss)
    assert scale_owner(config) is opt and scale_owner(Config()) is None
    guard = guard_config(config, emit=lambda e, **f: None, require_optimizer=True)
    assert "step" in vars(opt)
    config.finalize_model_grads_func([])
    opt.step()
    assert not guard.armed and opt.steps == 1
    other = Optimizer()
    guard_config(config, other, emit=lambda e, **f: None)
    assert "step" in vars(other) and "step" not in vars(opt)


def test_arming_on_a_config_nobody_bound_is_refused_when_an_optimizer_is_required() -> None:
    config = Config()
    with pytest.raises(BindingError, match="has no grad_scale_func") as info:
        guard_config(config, require_optimizer=True)
    assert info.value.slot == "grad_scale_func" and info.value.config_id == hex(id(config))
    guard = guard_config(config)
    with pytest.raises(FinalizerNotCalled):
        guard.after_step()


def test_a_config_is_an_object_with_all_five_slots() -> None:
    class Partial:
        finalize_model_grads_func = None

    assert reachable_configs([Chunk(config=Partial())], Partial()) == []  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [1, 2])
def test_each_slot_says_what_the_rules_expect_in_words(n: int) -> None:
    chunks, opt = [Chunk() for _ in range(n)], Optimizer()
    report = report_for(bound(chunks, opt, DDP(overlap_grad_reduce=True)), chunks, opt, DDP(overlap_grad_reduce=True))
    shape = "(the callable itself, 1 chunk)" if n == 1 else "(a list of 2)"
    assert [s.expected for s in report.slots] == [
        "megatron's finalize_model_grads (or a wrapper of it)",
        "the optimizer's scale_loss",
        f"each chunk's no_sync {shape}",
        f"each chunk's start_grad_sync {shape}",
        "nothing",
    ]


def test_the_report_records_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        SlotCheck("no_sync_func", "ok", "nothing", "nothing")  # type: ignore[misc]
    with pytest.raises(TypeError):
        CheckReport("C", "0x0", 1, ())  # type: ignore[misc]
    from lifecycle.testing import ConfigSeen

    with pytest.raises(TypeError):
        ConfigSeen("0x0", "C", "provider config", ())  # type: ignore[misc]


def test_slot_checks_and_configs_seen_are_frozen() -> None:
    from dataclasses import FrozenInstanceError

    from lifecycle.testing import ConfigSeen

    check = SlotCheck(slot="no_sync_func", verdict="ok", expected="nothing", found="nothing")
    with pytest.raises(FrozenInstanceError):
        check.verdict = "wrong"  # type: ignore[misc]
    seen = ConfigSeen(id="0x0", type="C", where="provider config", slots=())
    with pytest.raises(FrozenInstanceError):
        seen.where = "chunk 0.config"  # type: ignore[misc]


def test_a_guard_that_raised_can_be_left_by_its_with_block() -> None:
    opt = Optimizer()
    with pytest.raises(FinalizerNotCalled), FirstStepGuard(Config(), opt, emit=lambda e, **f: None):
        opt.step()
    assert "step" not in vars(opt) and opt.step() == (True, None, None)
