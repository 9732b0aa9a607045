"""Cases for test_check_binding.py, run in 2 spawned gloo ranks: bindings made by Megatron-Bridge's
and Megatron-LM's own code, by `bind_callbacks` in every slot-table configuration (then corrupted
slot by slot), and left behind by a rebuild, each judged by `bindings.check` and the first-step guard.
"""

from __future__ import annotations

from typing import Any

SLOTS = ("finalize_model_grads_func", "grad_scale_func", "no_sync_func", "grad_sync_func", "param_sync_func")


def _foreign(*args: Any, **kwargs: Any) -> None:
    """A callable no binding rule asks for."""


def _summary(report: Any) -> dict[str, Any]:
    try:
        report.raise_if_bad()
        error = None
    except Exception as exc:
        error = {"type": type(exc).__name__, "message": str(exc), "slot": getattr(exc, "slot", None)}
    return {
        "verdict": report.verdict,
        "verdicts": {s.slot: s.verdict for s in report.slots},
        "elsewhere": {s.slot: s.elsewhere for s in report.slots},
        "text": report.render(),
        "error": error,
        "scheduler_id": report.scheduler_config_id,
    }


def _guarded_steps(rt: Any, plan: list[str]) -> dict[str, Any]:
    """Steps under `guard_first_step`: 'train', 'eval' (forward only), 'twice' (a training step
    whose loop calls the finalizer once more)."""
    import megatron_cases as mc
    from megatron.core.utils import get_model_config

    from bindings import FinalizerNotCalled, guard_first_step

    config, optimizer = get_model_config(rt.model[0]), rt.optimizer
    original = config.finalize_model_grads_func
    guard = guard_first_step(list(rt.model), rt.optimizer, steps=len(plan))
    done: list[str] = []
    out: dict[str, Any] = {"error": None}
    try:
        for kind in plan:
            mc.train_step(rt, 2, forward_only=kind == "eval") if kind != "twice" else _twice(rt)
            done.append(kind)
    except FinalizerNotCalled as exc:
        out["error"] = {"calls": exc.finalizer_calls, "step": exc.step, "message": str(exc)}
    out.update(
        done=done,
        step_restored="step" not in vars(optimizer),
        finalizer_restored=config.finalize_model_grads_func is original,
        armed=guard.armed,
    )
    return out


def _twice(rt: Any) -> None:
    import megatron_cases as mc
    from megatron.core.utils import get_model_config

    config = get_model_config(rt.model[0])
    real_step, rt.optimizer.step = rt.optimizer.step, lambda: (True, None, None)
    try:
        mc.train_step(rt, 2)
    finally:
        rt.optimizer.step = real_step
    config.finalize_model_grads_func(list(rt.model))  # the loop finalizes once more
    rt.optimizer.step()


def _forward_guarded(rt: Any) -> dict[str, Any]:
    """One step through megatron's schedule with `guard_forward_step` around the forward step, as
    Megatron-LM's `pretrain(..., forward_step_func=...)` would run it after `train()` bound."""
    import megatron_cases as mc
    from megatron.core.pipeline_parallel import get_forward_backward_func

    from bindings import guard_forward_step

    seen: list[tuple[str, int]] = []
    fwd = guard_forward_step(mc.gpt_forward_step, emit=lambda event, **f: seen.append((event, f["step"])))
    try:
        get_forward_backward_func()(
            forward_step_func=fwd,
            data_iterator=iter(mc.batches(2)),
            model=rt.model[0],
            num_microbatches=2,
            seq_length=mc.SEQ,
            micro_batch_size=mc.MBS,
            forward_only=False,
        )
        rt.optimizer.step()
    except Exception as exc:
        return {
            "error": {"type": type(exc).__name__, "slot": getattr(exc, "slot", None), "message": str(exc)},
            "events": seen,
        }
    guard = fwd.guard[0]  # type: ignore[attr-defined]
    return {"error": None, "events": seen, "armed": guard.armed, "step_restored": "step" not in vars(rt.optimizer)}


def foreign_case(binder: str) -> dict[str, Any]:
    """The copying provider, bound by Bridge's or Megatron-LM's own code."""
    import foreign_binders
    import megatron_cases as mc

    from bindings import check

    with mc.parallel():
        rt = mc.build(mc.run_config(), "copying").runtime
        getattr(foreign_binders, binder)(list(rt.model), rt.optimizer, rt.ddp_config, rt.provider_config)
        report = check(list(rt.model), rt.ddp_config, rt.optimizer, provider_config=rt.provider_config)
        out = _summary(report)
        out["provider_id"] = hex(id(rt.provider_config))
        plan = ["train"] if binder == "bridge" else ["train", "eval", "train", "twice"]
        out["guard"] = _guarded_steps(rt, plan)
        out["forward_guard"] = _forward_guarded(rt)
    return out


def _corrupted(rt: Any, model: list[Any], align: bool, slot: str, value: Any) -> str:
    from megatron.core.utils import get_model_config

    from bindings import check

    config = get_model_config(model[0])
    kept = getattr(config, slot)
    setattr(config, slot, value)
    try:
        report = check(model, rt.ddp_config, rt.optimizer, align_grad_reduce=align)
    finally:
        setattr(config, slot, kept)
    bad = {s.slot: s.verdict for s in report.bad}
    return "wrong" if bad == {slot: "wrong"} else f"unexpected {bad}"


def table_case(ddp: dict[str, Any], chunks: int) -> dict[str, Any]:
    """A slot-table configuration bound by `bind_callbacks`: the report, then each slot corrupted."""
    import megatron_cases as mc
    import slot_cases

    from bindings import check

    pp, vpp = (2, 2) if chunks == 2 else (1, None)
    with mc.parallel(pp=pp, vpp=vpp):
        run = slot_cases._validated(ddp, pp, vpp)
        rt = mc.bind(mc.build(run)).runtime
        model, align = list(rt.model), run.ddp.align_grad_reduce
        out = {
            "report": _summary(check(model, rt.ddp_config, rt.optimizer)),
            "strict": _summary(check(model, rt.ddp_config, rt.optimizer, align_grad_reduce=align)),
            "corrupted": {},
        }
        for slot in SLOTS:
            out["corrupted"][slot] = _corrupted(rt, model, align, slot, _foreign)
            if chunks == 2 and slot in ("no_sync_func", "grad_sync_func"):
                reordered = _corrupted(
                    rt,
                    model,
                    align,
                    slot,
                    list(
                        reversed(
                            [getattr(c, "no_sync" if slot == "no_sync_func" else "start_grad_sync") for c in model]
                        )
                    ),
                )
                out["corrupted"][slot + " reordered"] = reordered
    return out


def stale_case() -> dict[str, Any]:
    """A rebuild on the same config object (a provider that keeps its config) without rebinding."""
    import megatron_cases as mc

    from bindings import check
    from lifecycle.core_entry.model_built import build_chunks, build_optimizer, wrap_ddp
    from lifecycle.core_entry.providers import gpt_provider, model_inputs

    with mc.parallel():
        run = mc.run_config(ddp={"overlap_grad_reduce": True})
        rt = mc.bind(mc.build(run, "gpt")).runtime
        config = mc.config_of(rt)
        chunks = build_chunks(gpt_provider, config, model_inputs(run, mc.VOCAB))
        model = wrap_ddp(chunks, rt.ddp_config)
        optimizer = build_optimizer(run, model)
        out = _summary(check(model, rt.ddp_config, optimizer))
        out["old_model_ok"] = check(list(rt.model), rt.ddp_config, rt.optimizer).verdict
    return out


def run_all(cases: list[tuple[str, dict[str, Any], int]]) -> dict[str, Any]:
    import megatron_cases as mc

    with mc.rehearsal_group():
        out: dict[str, Any] = {b: foreign_case(b) for b in ("bridge", "megatron_lm")}
        out["stale"] = stale_case()
        out["table"] = {label: table_case(ddp, chunks) for label, ddp, chunks in cases}
    return out
