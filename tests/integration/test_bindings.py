"""Bindings against real megatron-core on CPU: where callbacks land, rebuild, conflicts, unbinding.

One spawned group of 2 gloo ranks runs every case (megatron's import is paid once per rank);
chunk count 1 is DP=2, chunk count 2 is PP=2 with 2 virtual stages per rank.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

from lifecycle.launchers.local import run_ranks

KINDS = ("copying", "gpt", "hybrid", "gpt_builder")
COPIES = {"copying": True, "gpt": False, "hybrid": True, "gpt_builder": False}
SYNC_SLOTS = ("no_sync_func", "grad_sync_func", "param_sync_func")

pytestmark = pytest.mark.slow


def _provider(kind: str) -> Any:
    from lifecycle.core_entry.providers import GPTBuilder, HybridBuilder

    builders = {"hybrid": HybridBuilder(), "gpt_builder": GPTBuilder()}
    return builders.get(kind, kind)


def _shape(value: Any) -> Any:
    return len(value) if isinstance(value, list) else ("callable" if callable(value) else None)


def _matrix_case(kind: str, chunks: int, overlap: bool) -> dict[str, Any]:
    import megatron_cases as mc

    pp, vpp = (2, 2) if chunks == 2 else (1, None)
    provider = _provider(kind)
    with mc.parallel(pp=pp, vpp=vpp):
        run = mc.run_config(pp=pp, vpp=vpp, ddp={"overlap_grad_reduce": overlap})
        ctx = mc.bind(mc.build(run, provider))
        rt, report = ctx.runtime, ctx.runtime.binding
        scheduler = mc.config_of(rt)
        nested = getattr(getattr(provider, "spec", None), "transformer", None)
        out = {
            "report": report.log_fields(),
            "scheduler_id": hex(id(scheduler)),
            "slots_present": {s: _shape(getattr(scheduler, s)) for s in report.slots},
            "finalizer_is_counting": (scheduler.finalize_model_grads_func is report.watchdog.finalizer),
            "provider_has_finalizer": rt.provider_config.finalize_model_grads_func is not None,
            "nested_is_scheduler": None if nested is None else nested is scheduler,
            "step": mc.train_step(rt, 2 if chunks == 2 else 3),
        }
    return out


def _rebuild_case(provider: str) -> dict[str, Any]:
    import megatron_cases as mc

    with mc.parallel():
        ctx = mc.bind(mc.build(mc.run_config(ddp={"overlap_grad_reduce": True}), provider))
        old_target = ctx.runtime.binding.target_id
        old_config = weakref.ref(mc.config_of(ctx.runtime))
        old_chunk = weakref.ref(ctx.runtime.model[0])
        old_opt = weakref.ref(ctx.runtime.optimizer)
        mc.release_all(ctx)
        gc.collect()
        unbound = ctx.last("callbacks_unbound")
        freed = old_chunk() is None and old_opt() is None
        ctx = mc.bind(mc.build(ctx.runtime.config, provider))
        return {
            "old_target": old_target,
            "new": ctx.runtime.binding.log_fields(),
            "scheduler_id": hex(id(mc.config_of(ctx.runtime))),
            # the old config is freed, so its address can be the new one's: compare objects, not ids
            "new_target": old_config() is not mc.config_of(ctx.runtime),
            "unbound": unbound,
            "old_freed": freed,
            "step": mc.train_step(ctx.runtime, 3),
        }


def _unbind_case(unbind: bool) -> dict[str, Any]:
    """A provider keeps its config (as Bridge's provider objects do) past the model's life."""
    import megatron_cases as mc

    from bindings import unbind_callbacks

    with mc.parallel():
        ctx = mc.bind(mc.build(mc.run_config(ddp={"overlap_grad_reduce": True}), "gpt"))
        kept_config = mc.config_of(ctx.runtime)
        chunk, opt = weakref.ref(ctx.runtime.model[0]), weakref.ref(ctx.runtime.optimizer)
        if unbind:
            unbind_callbacks(ctx.runtime.binding)
        del ctx
        gc.collect()
        names = ("no_sync_func", "grad_scale_func")
        slots = {s: getattr(kept_config, s) is not None for s in names}
        return {"model_freed": chunk() is None, "optimizer_freed": opt() is None, "slots": slots}


def _conflict_case() -> dict[str, Any]:
    import megatron_cases as mc

    from bindings import unbind_callbacks
    from lifecycle.errors import BindingConflict

    def user_no_sync() -> Any:  # what MIMO-style user code installs
        raise AssertionError("never entered in this test")

    out: dict[str, Any] = {}
    with mc.parallel():
        ctx = mc.build(mc.run_config(ddp={"overlap_grad_reduce": True}), "gpt")
        config = mc.config_of(ctx.runtime)
        config.no_sync_func = user_no_sync
        try:
            mc.bind(ctx)
        except BindingConflict as exc:
            out["error"] = {"slot": exc.slot, "message": str(exc)}
        out["untouched"] = config.finalize_model_grads_func is None
        report = mc.bind(ctx, binding_policy="keep").runtime.binding
        out["keep"] = {"kept": report.kept, "user_kept": config.no_sync_func is user_no_sync}
        unbind_callbacks(report)
        out["after_unbind_user_kept"] = config.no_sync_func is user_no_sync
        report = mc.bind(ctx, binding_policy="replace").runtime.binding
        user_kept = config.no_sync_func is user_no_sync
        out["replace"] = {"replaced": report.replaced, "user_kept": user_kept}
    return out


def _watchdog_case() -> dict[str, Any]:
    """A step that bypasses the bound schedule (a hand-written loop) is caught after step one."""
    import megatron_cases as mc

    from lifecycle.errors import FinalizerNotCalled
    from lifecycle.log.records import first_step

    out: dict[str, Any] = {}
    with mc.parallel():
        ctx = mc.bind(mc.build(mc.run_config(), "gpt"))
        mc.train_step(ctx.runtime, 3)
        out["ok"] = ctx.runtime.binding.watchdog.after_step(first_step(ctx.emit))
        out["again"] = ctx.runtime.binding.watchdog.after_step(first_step(ctx.emit))
        events = [(e, f) for e, f in ctx.records if e.startswith("first_step")]
        ctx = mc.bind(mc.build(mc.run_config(), "gpt"))
        model, batch = ctx.runtime.model[0], mc.batches(1)[0]
        loss = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])
        loss.mean().backward()
        ctx.runtime.optimizer.step()
        try:
            ctx.runtime.binding.watchdog.after_step(first_step(ctx.emit))
        except FinalizerNotCalled as exc:
            out["error"] = {"calls": exc.finalizer_calls, "message": str(exc)}
        out["events"] = events + [(e, f) for e, f in ctx.records if e.startswith("first_step")]
    return out


def _all_cases() -> dict[str, Any]:
    import megatron_cases as mc

    with mc.rehearsal_group():
        return {
            "matrix": {(k, c, o): _matrix_case(k, c, o) for k in KINDS for c in (1, 2) for o in (False, True)},
            "rebuild": {p: _rebuild_case(p) for p in ("gpt", "copying")},
            "unbind": {u: _unbind_case(u) for u in (True, False)},
            "conflict": _conflict_case(),
            "watchdog": _watchdog_case(),
        }


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    return run_ranks(_all_cases, 2)


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("chunks", [1, 2])
@pytest.mark.parametrize("kind", KINDS)
def test_binding_lands_on_the_config_the_scheduler_reads(
    ranks: list[dict[str, Any]], kind: str, chunks: int, overlap: bool
) -> None:
    for result in ranks:
        case = result["matrix"][(kind, chunks, overlap)]
        report = case["report"]
        assert report["target_id"] == report["scheduler_config_id"] == case["scheduler_id"]
        assert report["copied"] is COPIES[kind]
        assert case["finalizer_is_counting"]
        assert case["provider_has_finalizer"] is not COPIES[kind]
        if kind in ("hybrid", "gpt_builder"):
            assert case["nested_is_scheduler"] is True
        assert report["chunks"] == chunks
        assert case["step"]["finalizer_calls"] == 1


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("chunks", [1, 2])
def test_sync_slots_follow_the_one_entry_per_chunk_contract(
    ranks: list[dict[str, Any]], chunks: int, overlap: bool
) -> None:
    case = ranks[0]["matrix"][("gpt", chunks, overlap)]
    expected = ["finalize_model_grads_func", "grad_scale_func"]
    expected += ["no_sync_func", "grad_sync_func"] if overlap else []
    assert case["report"]["slots"] == expected
    for slot, shape in case["slots_present"].items():
        want = (chunks if chunks > 1 else "callable") if slot in SYNC_SLOTS else "callable"
        assert shape == want, slot


@pytest.mark.parametrize("provider", ["gpt", "copying"])
def test_rebuild_binds_to_the_rebuilt_model_and_frees_the_old_one(ranks: list[dict[str, Any]], provider: str) -> None:
    for result in ranks:
        case = result["rebuild"][provider]
        assert case["unbound"]["target_id"] == case["old_target"]
        assert "finalize_model_grads_func" in case["unbound"]["slots"]
        assert case["old_freed"]
        assert case["new"]["target_id"] == case["scheduler_id"] and case["new_target"]
        assert case["new"]["copied"] is (provider == "copying")
        assert case["step"]["finalizer_calls"] == 1


def test_unbinding_lets_the_old_model_and_optimizer_be_freed(ranks: list[dict[str, Any]]) -> None:
    case = ranks[0]["unbind"][True]
    assert case == {
        "model_freed": True,
        "optimizer_freed": True,
        "slots": {"no_sync_func": False, "grad_scale_func": False},
    }


def test_without_unbinding_a_surviving_config_keeps_the_old_model_alive(
    ranks: list[dict[str, Any]],
) -> None:
    case = ranks[0]["unbind"][False]
    assert not case["model_freed"] and not case["optimizer_freed"]


def test_a_user_installed_callback_is_refused_kept_or_replaced_never_overwritten_silently(
    ranks: list[dict[str, Any]],
) -> None:
    case = ranks[0]["conflict"]
    assert case["error"]["slot"] == "no_sync_func"
    assert "user_no_sync" in case["error"]["message"] and "no_sync" in case["error"]["message"]
    assert case["untouched"]
    assert case["keep"] == {"kept": ("no_sync_func",), "user_kept": True}
    assert case["after_unbind_user_kept"]
    assert case["replace"] == {"replaced": ("no_sync_func",), "user_kept": False}


def test_first_step_watchdog_logs_one_call_and_catches_a_bypassing_loop(
    ranks: list[dict[str, Any]],
) -> None:
    case = ranks[0]["watchdog"]
    assert case["ok"] == 1
    assert case["again"] is None
    assert case["error"]["calls"] == 0
    assert "finalizer_calls=0" in case["error"]["message"]
    assert case["events"] == [
        ("first_step_finalized", {"finalizer_calls": 1}),
        ("first_step_not_finalized", {"finalizer_calls": 0}),
    ]
