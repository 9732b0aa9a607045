"""Install megatron's scheduler callbacks on the config its schedules read, verify, report.

What each slot holds is decided in `bindings._rules` (shared with `bindings.check`). The contract
(megatron-core's training loop and Megatron-Bridge's `_update_model_config_funcs`):

- with an optimizer: `finalize_model_grads_func` = megatron's `finalize_model_grads` (bound to the
  process-group collection where the installed megatron-core accepts one) and
  `grad_scale_func` = `optimizer.scale_loss`;
- with a DDP-wrapped model and `overlap_grad_reduce`: `no_sync_func`, plus `grad_sync_func` when
  `align_grad_reduce`; with `overlap_param_gather` and `align_param_gather`: `param_sync_func`;
- the three sync slots take *one entry per chunk*: a list when the model has several chunks (the
  interleaved schedule indexes it by chunk and enters every chunk's `no_sync`), the single
  callable when it has one (the non-interleaved schedules call `config.no_sync_func()` directly).

The target is `megatron.core.utils.get_model_config(model[0])`, never the provider's config.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from bindings._errors import BindingConflict, BindingError
from bindings._protocol import SLOTS, DDPConfig, Module, Optimizer, Policy, ProcessGroups, SchedulerConfig, SlotValue
from bindings._report import BindingReport, object_id
from bindings._rules import (
    FINALIZER,
    SCALE_LOSS,
    align_grad_reduce_of,
    chunk_entries,
    flag,
    same,
    sources,
)
from bindings._watchdog import CountingFinalizer, FirstStepWatchdog

_POLICIES: tuple[str | None, ...] = (None, "keep", "replace")
_PAUSED: Final = "param_sync_func"
"""The slot `pause_param_sync` takes off the bound config and `resume_param_sync` puts back."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Installed:
    """What one installation did on one config object."""

    installed: dict[str, SlotValue]
    kept: tuple[str, ...]
    replaced: tuple[str, ...]
    finalizer: CountingFinalizer[..., None] | None


def finalizer(pg_collection: ProcessGroups | None = None) -> Callable[..., None]:
    """megatron's `finalize_model_grads`, with `pg_collection` bound where the signature has it."""
    from megatron.core.distributed import finalize_model_grads

    accepts = "pg_collection" in inspect.signature(finalize_model_grads).parameters
    if pg_collection is not None and accepts:
        return functools.partial(finalize_model_grads, pg_collection=pg_collection)
    fn: Callable[..., None] = finalize_model_grads
    return fn


def planned(
    chunks: Sequence[Module],
    optimizer: Optimizer | None,
    ddp_config: DDPConfig | None,
    pg_collection: ProcessGroups | None = None,
    align_grad_reduce: bool | None = None,
) -> dict[str, SlotValue]:
    """The callbacks the contract asks for, by slot, in `SLOTS` order (`optimizer` None: none of
    its callbacks)."""
    wanted = sources(ddp_config, optimizer=optimizer is not None, align_grad_reduce=align_grad_reduce)
    if flag(ddp_config, "overlap_grad_reduce") or flag(ddp_config, "overlap_param_gather"):
        _require_ddp(chunks)
    plan: dict[str, SlotValue] = {}
    for slot, source in wanted.items():
        if source == FINALIZER:
            plan[slot] = CountingFinalizer(finalizer(pg_collection))
        elif source == SCALE_LOSS:
            plan[slot] = getattr(optimizer, SCALE_LOSS)
        else:
            plan[slot] = chunk_entries(chunks, source)
    return plan


def _require_ddp(chunks: Sequence[Module]) -> None:
    for index, chunk in enumerate(chunks):
        if not (hasattr(chunk, "no_sync") and hasattr(chunk, "start_grad_sync")):
            raise BindingError(
                f"ddp_config asks for overlapped communication but model chunk {index} is "
                f"{type(chunk).__name__}, not wrapped in megatron's DistributedDataParallel; wrap "
                "every chunk in DistributedDataParallel or set overlap_grad_reduce and "
                "overlap_param_gather to false",
                chunk=index,
                chunk_type=type(chunk).__name__,
            )


def install(target: SchedulerConfig, plan: Mapping[str, SlotValue], policy: Policy | None = None) -> Installed:
    """Write `plan` onto `target`, slot by slot, honouring `policy` on conflicts.

    Conflicts are all checked before anything is written, so a refused binding writes nothing.
    """
    if policy not in _POLICIES:
        raise BindingError(
            f"policy={policy!r} is not a binding policy; pass None (refuse conflicts), "
            "'keep' (leave the existing callable) or 'replace' (overwrite it)",
            policy=policy,
        )
    kept: list[str] = []
    replaced: list[str] = []
    for slot in SLOTS:
        if slot not in plan:
            continue
        current = getattr(target, slot, None)
        if current is None or same(current, plan[slot]):
            continue
        if policy is None:
            raise BindingConflict(
                f"{type(target).__name__}.{slot} already holds {current!r}; binding would install "
                f"{plan[slot]!r}. Pass policy='keep' to leave the existing callable, "
                "policy='replace' to overwrite it, or unbind the previous binding first",
                slot=slot,
                existing=repr(current),
                new=repr(plan[slot]),
            )
        (kept if policy == "keep" else replaced).append(slot)
    installed = {slot: value for slot, value in plan.items() if slot not in kept}
    for slot, value in installed.items():
        setattr(target, slot, value)
    fin = installed.get("finalize_model_grads_func")
    return Installed(
        installed=installed,
        kept=tuple(kept),
        replaced=tuple(replaced),
        finalizer=fin if isinstance(fin, CountingFinalizer) else None,
    )


def _verify(chunks: Sequence[Module], target: SchedulerConfig, installed: Mapping[str, SlotValue]) -> SchedulerConfig:
    from megatron.core.utils import get_model_config

    scheduler = get_model_config(chunks[0])
    if scheduler is not target:
        raise BindingError(
            f"the scheduler reads {type(scheduler).__name__} at {object_id(scheduler)} but the "
            f"callbacks went to {object_id(target)}; bind to get_model_config(model[0])",
            scheduler_config_id=object_id(scheduler),
            target_id=object_id(target),
        )
    missing = [s for s, v in installed.items() if getattr(scheduler, s, None) is not v]
    if missing:
        raise BindingError(
            f"slots {missing} do not hold the installed callbacks right after binding; something "
            "rewrote the config (a property or __setattr__ on the config class?)",
            slots=missing,
        )
    return scheduler


def chunk_list(model: Sequence[Module]) -> list[Module]:
    """`model` as a list of chunks; a BindingError for anything but a list or tuple (a caller
    without types may pass one chunk, `model[0]`)."""
    if not isinstance(model, (list, tuple)):
        raise BindingError(
            f"model is a {type(model).__name__}, not a list of model chunks; pass the list megatron's "
            "get_model returns (bind_callbacks(model, ...), not bind_callbacks(model[0], ...))",
            chunks=None,
            got=type(model).__name__,
        )
    return list(model)


def bind_callbacks(
    model: Sequence[Module],
    optimizer: Optimizer | None,
    ddp_config: DDPConfig | None,
    *,
    provider_config: SchedulerConfig | None = None,
    policy: Policy | None = None,
    pg_collection: ProcessGroups | None = None,
    align_grad_reduce: bool | None = None,
) -> BindingReport:
    """Bind the training callbacks for `model` (list of chunks) to the config its schedule reads.

    `provider_config` is the config the provider was given; when the model holds another object
    (a provider that copies), the report says `copied=True` and binding still targets the model's.
    `align_grad_reduce` defaults to `ddp_config.align_grad_reduce` where it exists, else True.
    """
    chunks = chunk_list(model)
    from megatron.core.utils import get_model_config

    if not chunks:
        raise BindingError("model is an empty list; build the model before binding", chunks=0)
    target = get_model_config(chunks[0])
    align = align_grad_reduce_of(ddp_config, align_grad_reduce)
    done = install(target, planned(chunks, optimizer, ddp_config, pg_collection, align), policy)
    scheduler = _verify(chunks, target, done.installed)
    return _report(target, scheduler, provider_config, done, chunks, optimizer, ddp_config, align, policy)


def _report(
    target: SchedulerConfig,
    scheduler: SchedulerConfig,
    provider_config: SchedulerConfig | None,
    done: Installed,
    chunks: Sequence[Module],
    optimizer: Optimizer | None,
    ddp_config: DDPConfig | None,
    align: bool,
    policy: Policy | None,
) -> BindingReport:
    return BindingReport(
        target_type=type(target).__name__,
        target_id=hex(id(target)),
        scheduler_config_id=hex(id(scheduler)),
        provider_config_id=object_id(provider_config),
        copied=provider_config is not None and provider_config is not target,
        slots=tuple(done.installed),
        kept=done.kept,
        replaced=done.replaced,
        chunks=len(chunks),
        optimizer=optimizer is not None,
        overlap_grad_reduce=flag(ddp_config, "overlap_grad_reduce"),
        overlap_param_gather=flag(ddp_config, "overlap_param_gather"),
        align_grad_reduce=align,
        align_param_gather=flag(ddp_config, "align_param_gather"),
        policy=policy,
        watchdog=None if done.finalizer is None else FirstStepWatchdog(done.finalizer),
        target_ref=weakref.ref(target),
        installed_ids=MappingProxyType({s: id(v) for s, v in done.installed.items()}),
    )


def _ours(value: SlotValue, ident: int) -> bool:
    """`value` is what binding installed, or a list the schedule made from it.

    megatron's interleaved schedule rewrites a single `grad_sync_func`/`param_sync_func` into
    `[fn for _ in model]` on the config it reads; that list holds our callable, so it is ours too.
    """
    if id(value) == ident:
        return True
    return isinstance(value, list) and bool(value) and all(id(item) == ident for item in value)


def unbind_callbacks(report: BindingReport) -> tuple[str, ...]:
    """Clear every slot that still holds what `report` installed (or a list the schedule made
    from it), verify the config holds none of it afterwards, and return the cleared slots.

    Afterwards the config no longer references the model's `no_sync`/`start_*_sync` methods or
    the optimizer's `scale_loss`, so dropping the model and optimizer frees them. A slot that
    another writer replaced since binding is left alone.
    """
    target = report.target()
    if target is None:
        return ()
    cleared: list[str] = []
    for slot, ident in report.installed_ids.items():
        if _ours(getattr(target, slot, None), ident):
            setattr(target, slot, None)
            cleared.append(slot)
    left = [s for s, ident in report.installed_ids.items() if _ours(getattr(target, s, None), ident)]
    if left:
        raise BindingError(
            f"slots {left} still hold the bound callbacks after unbinding; something rewrote them "
            "as they were cleared (a property or __setattr__ on the config class?). Clear them "
            "with setattr(get_model_config(model[0]), slot, None) before dropping the model",
            slots=left,
        )
    return tuple(cleared)


def pause_param_sync(report: BindingReport) -> SlotValue:
    """Take `param_sync_func` off the bound config and return it (None when nothing was there).

    Megatron-LM does this for the first training step with the distributed optimizer and
    overlapped param gather, so the schedule's all-gathers are no-ops until one step succeeded.
    """
    target = report.target()
    if target is None:
        return None
    current = getattr(target, _PAUSED, None)
    if current is not None:
        setattr(target, _PAUSED, None)
    return current


def resume_param_sync(report: BindingReport, paused: object) -> None:
    """Put back what `pause_param_sync` took, unless something else was bound there since."""
    target = report.target()
    if target is None or paused is None:
        return
    if getattr(target, _PAUSED, None) is None:
        setattr(target, _PAUSED, paused)
