"""Check a binding anyone made: what each slot of the scheduler's config holds, against the rules.

`check(model, ddp_config, optimizer)` reads `get_model_config(model[0])` (what megatron's schedules
and `finalize_model_grads` read), judges each slot by `bindings._rules` (the rules `bind_callbacks`
follows), and, for a slot that is not right, lists the other configs reachable from the model's
wrappers and the provider's config that hold something in that slot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import TypeGuard

from bindings._errors import BindingError
from bindings._protocol import SLOTS, DDPConfig, Module, Optimizer, SchedulerConfig, SlotValue
from bindings._report import object_id
from bindings._rules import FINALIZER, SCALE_LOSS, chunk_entries, same, sources
from bindings._verdict import CheckReport, ConfigSeen, SlotCheck, Verdict

_MAX_DEPTH = 8
"""How many `.module` wrappers (DDP, Float16Module, user wrappers) a chunk may have."""


def unwrap_finalizer(value: object) -> object:
    """The function under a finalizer's wrappers, to compare with megatron's `finalize_model_grads`:
    `CountingFinalizer`/guard counters (`.fn`), `functools.partial` (`.func`), `functools.wraps`
    (`__wrapped__`), up to 8 deep."""
    for _ in range(_MAX_DEPTH):
        inner = getattr(value, "fn", None) or getattr(value, "func", None)
        inner = inner or getattr(value, "__wrapped__", None)
        if inner is None:
            return value
        value = inner
    return value


def describe_slot(value: SlotValue) -> str:
    """A slot's value in words, as a `SlotCheck.found` says it: `nothing`, `Owner.method at 0x..`, a
    function's name, `Wrapper(function)` for a wrapped finalizer, a list of these."""
    if value is None:
        return "nothing"
    if isinstance(value, list):
        return "[" + ", ".join(describe_slot(v) for v in value) + "]"
    owner = getattr(value, "__self__", None)
    name = getattr(value, "__name__", None)
    if owner is not None and name is not None and not isinstance(owner, ModuleType):
        return f"{type(owner).__name__}.{name} at {object_id(owner)}"
    inner = unwrap_finalizer(value)
    label = getattr(inner, "__qualname__", None) or type(inner).__name__
    return label if inner is value else f"{type(value).__name__}({label})"


def _entries(value: SlotValue) -> Sequence[SlotValue]:
    return value if isinstance(value, list) else [value]


def _stale(value: SlotValue, chunks: Sequence[Module], method: str) -> bool:
    """Every entry is `method` bound to an object that is not one of the model's chunks."""
    owners = [getattr(e, "__self__", None) for e in _entries(value)]
    names = {getattr(e, "__name__", None) for e in _entries(value)}
    alive = {id(c) for c in chunks}
    return names == {method} and all(o is not None and id(o) not in alive for o in owners)


def _judge_scale(value: SlotValue, optimizer: Optimizer | None) -> Verdict:
    owner = getattr(value, "__self__", None)
    if getattr(value, "__name__", None) != SCALE_LOSS or owner is None:
        return "wrong"
    if optimizer is None or owner is optimizer:
        return "ok"
    return "stale" if type(owner) is type(optimizer) else "wrong"


def judge_slot(
    source: str | None,
    value: SlotValue,
    chunks: Sequence[Module],
    optimizer: Optimizer | None,
    finalizer: Callable[..., None] | None,
) -> Verdict:
    """One slot's verdict ("ok", "missing", "stale", "wrong") for `value`, what the slot holds.
    `source` is what the rules ask for (`sources(...)[slot]`; None: nothing); `chunks`, the model's
    chunks; `optimizer`, the one `scale_loss` must belong to (None: any); `finalizer`, megatron's
    `finalize_model_grads`. Stale: a bound method of a chunk or optimizer that is gone."""
    if source is None:
        if value is None:
            return "ok"
        method = next((m for m in ("no_sync", "start_grad_sync", "start_param_sync") if _stale(value, chunks, m)), None)
        return "stale" if method is not None else "wrong"
    if value is None:
        return "missing"
    if source == FINALIZER:
        return "ok" if unwrap_finalizer(value) is finalizer else "wrong"
    if source == SCALE_LOSS:
        return _judge_scale(value, optimizer)
    if same(value, chunk_entries(chunks, source)):
        return "ok"
    return "stale" if _stale(value, chunks, source) else "wrong"


def _expected(source: str | None, chunks: int) -> str:
    if source is None:
        return "nothing"
    if source == FINALIZER:
        return "megatron's finalize_model_grads (or a wrapper of it)"
    if source == SCALE_LOSS:
        return "the optimizer's scale_loss"
    return f"each chunk's {source}" + (" (the callable itself, 1 chunk)" if chunks == 1 else f" (a list of {chunks})")


def inspect_slots(
    scheduler: SchedulerConfig,
    chunks: Sequence[Module],
    wanted: dict[str, str],
    *,
    optimizer: Optimizer | None = None,
    finalizer: Callable[..., None] | None = None,
    others: Sequence[tuple[SchedulerConfig, str]] = (),
) -> CheckReport:
    """`check_config`'s report against sources you choose: `scheduler` (the config the schedule
    reads) judged slot by slot against `wanted` (the rules' sources by slot, as `sources` gives).
    `others`: other configs reachable from the model, each with where it was found
    (`reachable_configs`); `finalizer`: megatron's `finalize_model_grads`."""
    seen = tuple(_seen(config, where) for config, where in others if config is not scheduler)
    checks = []
    for slot in SLOTS:
        value = getattr(scheduler, slot, None)
        verdict = judge_slot(wanted.get(slot), value, chunks, optimizer, finalizer)
        elsewhere = tuple(s.label() for s in seen if slot in s.slots) if verdict != "ok" else ()
        checks.append(
            SlotCheck(
                slot=slot,
                verdict=verdict,
                expected=_expected(wanted.get(slot), len(chunks)),
                found=describe_slot(value),
                elsewhere=elsewhere,
            )
        )
    return CheckReport(
        scheduler_config_type=type(scheduler).__name__,
        scheduler_config_id=hex(id(scheduler)),
        chunks=len(chunks),
        slots=tuple(checks),
        others=seen,
    )


def _seen(config: SchedulerConfig, where: str) -> ConfigSeen:
    held = tuple(s for s in SLOTS if getattr(config, s, None) is not None)
    return ConfigSeen(id=hex(id(config)), type=type(config).__name__, where=where, slots=held)


def _is_config(obj: object) -> TypeGuard[SchedulerConfig]:
    return obj is not None and all(hasattr(obj, slot) for slot in SLOTS)


def reachable_configs(
    chunks: Sequence[Module], provider_config: SchedulerConfig | None = None
) -> list[tuple[SchedulerConfig, str]]:
    """Every distinct config (an object with all five of the scheduler's slots) reachable from the
    chunks' wrappers (`.module` chains, `.config`) and their submodules, and the provider's config,
    each with where it was found ("chunk 0.module.config"): where else callbacks may have been set."""
    found: dict[int, tuple[SchedulerConfig, str]] = {}

    def add(config: object, where: str) -> None:
        if _is_config(config) and id(config) not in found:
            found[id(config)] = (config, where)

    add(provider_config, "provider config")
    for index, chunk in enumerate(chunks):
        layer, path = chunk, f"chunk {index}"
        for _ in range(_MAX_DEPTH):
            add(getattr(layer, "config", None), f"{path}.config")
            inner = getattr(layer, "module", None)
            if inner is None:
                break
            layer, path = inner, f"{path}.module"
        named: Callable[[], Iterable[tuple[str, Module]]] | None = getattr(layer, "named_modules", None)
        for name, sub in named() if named is not None else ():
            add(getattr(sub, "config", None), f"{path}.{name}.config" if name else f"{path}.config")
    return list(found.values())


def model_chunks(model: Sequence[Module]) -> list[Module]:
    """`model` as a non-empty list of chunks (what `check` and `guard_first_step` take), else a
    BindingError naming what to pass (`check(model)`, not `check(model[0])`, from a caller without
    types)."""
    if not isinstance(model, (list, tuple)) or not model:
        raise BindingError(
            f"model is {'an empty list' if isinstance(model, (list, tuple)) else type(model).__name__}"
            ", not a list of model chunks; pass the list megatron's get_model returns (check(model), not "
            "check(model[0]))",
            got=type(model).__name__,
        )
    return list(model)


def check_config(
    scheduler: SchedulerConfig,
    chunks: Sequence[Module],
    *,
    ddp_config: DDPConfig | None = None,
    optimizer: Optimizer | None = None,
    provider_config: SchedulerConfig | None = None,
    align_grad_reduce: bool | None = None,
    finalizer: Callable[..., None] | None = None,
    chunk_config_ids: tuple[str, ...] = (),
) -> CheckReport:
    """`bindings.check` on a scheduler config you already hold, without megatron: `scheduler` (the
    config megatron's schedules read for `chunks`), `finalizer` (megatron's `finalize_model_grads`),
    `chunk_config_ids` (each chunk's config id, for the report). The other arguments are `check`'s."""
    if ddp_config is None:
        ddp_config = getattr(chunks[0], "ddp_config", None)
    if align_grad_reduce is None and not hasattr(ddp_config, "align_grad_reduce"):
        # A training-loop setting megatron's DDP config does not carry: the binding tells it.
        align_grad_reduce = getattr(scheduler, "grad_sync_func", None) is not None
    wanted = sources(ddp_config, optimizer=True, align_grad_reduce=align_grad_reduce)
    report = inspect_slots(
        scheduler,
        chunks,
        wanted,
        optimizer=optimizer,
        finalizer=finalizer,
        others=reachable_configs(chunks, provider_config),
    )
    return report.with_chunk_configs(chunk_config_ids, object_id(provider_config))
