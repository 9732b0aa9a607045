"""Cases for test_slot_table.py, run in 2 spawned gloo ranks: each configuration is validated
(normalized), built, bound and stepped through the real phases, and its slots described."""

from __future__ import annotations

from typing import Any

SLOTS = ("finalize_model_grads_func", "grad_scale_func", "no_sync_func", "grad_sync_func", "param_sync_func")


def _describe(value: Any, model: list[Any], optimizer: Any) -> Any:
    """A slot's value in the terms of the expected table (see test_slot_table.py)."""
    if value is None:
        return None
    fn = getattr(value, "fn", None)
    if fn is not None:  # the lifecycle's CountingFinalizer around megatron's function
        return getattr(fn, "func", fn).__name__
    entries = value if isinstance(value, list) else [value]
    owners = [getattr(e, "__self__", None) for e in entries]
    names = {getattr(e, "__name__", repr(e)) for e in entries}
    if owners == [optimizer]:
        return names.pop()
    if len(names) != 1 or owners != model[: len(entries)]:
        return ("unexpected", repr(value))
    return (names.pop(), len(entries) if isinstance(value, list) else "callable")


def _validated(overrides: dict[str, Any], pp: int, vpp: int | None) -> Any:
    import megatron_cases as mc

    from lifecycle import Options, Runtime
    from lifecycle.core_entry import validated
    from states import Trigger

    run = mc.run_config(pp=pp, vpp=vpp, ddp=overrides, training={"num_microbatches": 2})
    ctx = mc.PhaseCtx(Runtime(config=run), trigger=Trigger.VALIDATE, options=Options(environment_checks=False))
    return validated.enter(ctx).config


def slot_case(ddp: dict[str, Any], chunks: int) -> dict[str, Any]:
    import megatron_cases as mc

    pp, vpp = (2, 2) if chunks == 2 else (1, None)
    with mc.parallel(pp=pp, vpp=vpp):
        ctx = mc.bind(mc.build(_validated(ddp, pp, vpp)))
        rt = ctx.runtime
        model, scheduler = list(rt.model or ()), mc.config_of(rt)
        slots = {s: _describe(getattr(scheduler, s), model, rt.optimizer) for s in SLOTS}
        step = mc.train_step(rt, 2)
        mc.release_all(ctx)
        cleared = all(getattr(scheduler, s) is None for s in SLOTS)
    return {"slots": slots, "finalizer_calls": step["finalizer_calls"], "cleared": cleared}


def interleaved_one_chunk() -> dict[str, Any]:
    """vpp=1 passed to megatron as is (no normalization): the interleaved schedule with one chunk
    rewrites the single sync callables into lists on the config; unbinding must clear those."""
    import megatron_cases as mc
    from megatron.core.pipeline_parallel import get_forward_backward_func

    with mc.parallel(pp=2, vpp=1):
        ctx = mc.bind(mc.build(mc.run_config(pp=2, vpp=1, ddp={"overlap_grad_reduce": True})))
        rt = ctx.runtime
        model, scheduler = list(rt.model or ()), mc.config_of(rt)
        schedule = get_forward_backward_func()
        schedule(
            forward_step_func=mc.gpt_forward_step,
            data_iterator=[iter(mc.batches(2))],
            model=model,
            num_microbatches=2,
            seq_length=mc.SEQ,
            micro_batch_size=mc.MBS,
            forward_only=False,
        )
        after_step = {s: type(getattr(scheduler, s)).__name__ for s in SLOTS}
        mc.release_all(ctx)
        unbound = ctx.last("callbacks_unbound")["slots"]
        left = {s: getattr(scheduler, s) for s in SLOTS}
    return {"schedule": schedule.__name__, "after_step": after_step, "unbound": unbound, "left": left}


def run_all(cases: list[tuple[str, dict[str, Any], int]]) -> dict[str, Any]:
    import warnings

    import megatron_cases as mc

    warnings.simplefilter("ignore")
    with mc.rehearsal_group():
        out = {label: slot_case(ddp, chunks) for label, ddp, chunks in cases}
        out["interleaved_one_chunk"] = interleaved_one_chunk()
    return out
