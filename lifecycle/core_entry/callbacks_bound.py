"""BIND_CALLBACKS entry work: bind megatron's scheduler callbacks; `release` unbinds them."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from lifecycle.errors import BindingError
from lifecycle.log import records
from states import SideEffect

if TYPE_CHECKING:
    from lifecycle.runtime import PhaseContext, Runtime


def enter(ctx: PhaseContext) -> Runtime:
    """Bind to `get_model_config(model[0])`; emit `callbacks_bound` with the report's fields.

    `ctx.options.binding_policy` (`"keep"` or `"replace"`) decides conflicts with callables
    already on the config; without it a conflict raises `BindingConflict`.
    """
    from bindings import bind_callbacks

    rt = ctx.runtime
    if not rt.model:
        raise BindingError(
            "bind_callbacks needs a built model but runtime.model is empty; run build_model first",
            state="MODEL_BUILT",
        )
    ctx.side_effect(SideEffect.CALLBACKS)
    report = bind_callbacks(
        list(rt.model),
        rt.optimizer,
        rt.ddp_config,
        provider_config=rt.provider_config,
        policy=ctx.options.binding_policy,
        pg_collection=rt.pg_collection,
        align_grad_reduce=rt.config.ddp.align_grad_reduce,
    )
    ctx.emit(records.CallbacksBound(**report.log_fields()))
    return dataclasses.replace(rt, binding=report)


def release(ctx: PhaseContext, runtime: Runtime) -> Runtime:
    """Clear the installed callbacks so the old model and optimizer can be freed."""
    from bindings import BindingReport, unbind_callbacks

    report = runtime.binding
    if not isinstance(report, BindingReport):
        return dataclasses.replace(runtime, binding=None)
    slots = unbind_callbacks(report)
    ctx.emit(records.CallbacksUnbound(target_id=report.target_id, slots=list(slots)))
    return dataclasses.replace(runtime, binding=None)
