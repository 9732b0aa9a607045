"""Light in-process phases: the real engine, guards and log, with simulated Megatron objects.

For the engine's own tests, the fuzzer and the overhead benchmark. They declare the same side
effects as the real phases, build a model whose chunks hold a copy of the provider's config (as a
copying provider would) and bind to `model[0].config` through `bindings.install`, so their logs
have the real shape. A state of the table with no light phase of its own (one added to the chain,
whose real work is in `core_entry`) gets a pass-through one: its trigger counts for `fail_on`, it
declares and logs nothing, so the engine logs its transition and nothing else, as the audit and
`check_log` read any state's.
"""

from __future__ import annotations

import copy
import dataclasses
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar

from bindings import BindingReport, SlotValue, install
from lifecycle.log import records
from lifecycle.runtime import PhaseContext, Phases, Runtime
from states import STARTUP_ORDER, SideEffect, State

if TYPE_CHECKING:
    import torch

SLOTS = ("finalize_model_grads_func", "grad_scale_func")


@dataclass
class SimConfig:
    """Stands in for a TransformerConfig: the attributes bindings write (binding installs the no-op
    callback `_finalize`)."""

    num_layers: int = 2
    finalize_model_grads_func: SlotValue = None
    grad_scale_func: SlotValue = None
    no_sync_func: SlotValue = None
    grad_sync_func: SlotValue = None
    param_sync_func: SlotValue = None


@dataclass
class SimChunk:
    config: SimConfig = field(default_factory=SimConfig)

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        return iter(())

    def named_modules(self) -> Iterator[tuple[str, SimChunk]]:
        """Itself, with no submodules (a torch module lists itself first, named "")."""
        return iter([("", self)])


@dataclass(frozen=True)
class SimTokenizer:
    vocab_size: int


class SimOptimizer:
    def step(self) -> None:
        return None

    def zero_grad(self) -> None:
        return None

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return loss


def copying_provider(config: SimConfig, *, pre_process: bool, post_process: bool, vp_stage: int | None) -> SimChunk:
    """Copies its config into the model, like Nemotron Omni's provider (its fields are flat)."""
    return SimChunk(config=copy.copy(config))


def _finalize(*_args: object, **_kwargs: object) -> None:
    return None


class InProcessPhases(Phases):
    """A PhaseSet with no torch or megatron: every side effect is declared, none is performed.
    `fail_on` names a trigger whose phase raises (once per call, for the engine's failure tests).
    Every startup state of the table has a phase: the five below, a pass-through for any other."""

    SLOTS: ClassVar[tuple[str, ...]] = SLOTS
    """The scheduler callbacks CALLBACKS_BOUND binds (a no-op in each) and its release clears."""

    def __init__(self, *, fail_on: str | None = None) -> None:
        super().__init__(
            {
                State.VALIDATED: _Validated(self),
                State.SERVICES_READY: _Services(self),
                State.DISTRIBUTED: _Distributed(self),
                State.MODEL_BUILT: _Model(self),
                State.CALLBACKS_BOUND: _Callbacks(self),
            }
        )
        for state in STARTUP_ORDER[1:]:
            if self.phase_for(state) is None:
                self.register(state, _Phase(self))
        self.fail_on = fail_on
        self.calls: list[str] = []

    def _maybe_fail(self, name: str) -> None:
        self.calls.append(name)
        if self.fail_on == name:
            raise RuntimeError(f"injected failure in {name}")


@dataclass(frozen=True)
class _Phase:
    """An in-process phase: entry work named by its trigger (`fail_on`); by default nothing to build
    and nothing to release (the pass-through of a state with no light phase of its own)."""

    owner: InProcessPhases

    def enter(self, ctx: PhaseContext) -> Runtime:
        self.owner._maybe_fail(ctx.trigger.value)
        return self.build(ctx)

    def build(self, ctx: PhaseContext) -> Runtime:
        return ctx.runtime

    def release(self, ctx: PhaseContext) -> Runtime:
        return ctx.runtime


class _Validated(_Phase):
    """Nothing beyond the engine's own validation."""


class _Services(_Phase):
    def build(self, ctx: PhaseContext) -> Runtime:
        ctx.side_effect(SideEffect.TOKENIZER)
        vocab = ctx.runtime.config.model.vocab_size or ctx.runtime.config.tokenizer.vocab_size
        ctx.emit(records.ServicesReady(tokenizer="SimTokenizer", vocab_size=vocab, vocab_source="tokenizer"))
        return dataclasses.replace(
            ctx.runtime, services_ready=True, tokenizer=SimTokenizer(vocab), vocab_size=vocab, vocab_source="tokenizer"
        )

    def release(self, ctx: PhaseContext) -> Runtime:
        return dataclasses.replace(
            ctx.runtime, services_ready=False, tokenizer=None, vocab_size=None, vocab_source=None
        )


class _Distributed(_Phase):
    def build(self, ctx: PhaseContext) -> Runtime:
        for kind in (SideEffect.PROCESS_GROUP, SideEffect.PARALLEL_STATE, SideEffect.RNG):
            ctx.side_effect(kind)
        p = ctx.runtime.config.parallel
        ctx.emit(
            records.DistributedInitialized(
                backend="sim",
                tp=p.tp,
                pp=p.pp,
                cp=p.cp,
                ep=p.ep,
                dp=max(1, ctx.runtime.world_size // (p.tp * p.pp * p.cp)),
                vpp=p.vpp,
            )
        )
        return dataclasses.replace(ctx.runtime, distributed=True, backend="sim")

    def release(self, ctx: PhaseContext) -> Runtime:
        return dataclasses.replace(ctx.runtime, distributed=False, backend=None)


class _Model(_Phase):
    def build(self, ctx: PhaseContext) -> Runtime:
        ctx.side_effect(SideEffect.MODEL)
        given = ctx.provider or copying_provider
        if not callable(given):
            raise TypeError(f"provider {given!r} is not callable")
        provider: Callable[..., SimChunk] = given  # called in copying_provider's shape: no `inputs`
        provider_config = SimConfig(num_layers=ctx.runtime.config.model.num_layers)
        chunks = tuple(provider(provider_config, pre_process=True, post_process=True, vp_stage=None) for _ in range(1))
        ctx.emit(
            records.ModelBuilt(
                chunks=len(chunks),
                model_config_id=hex(id(chunks[0].config)),
                provider_config_id=hex(id(provider_config)),
                optimizer=True,
            )
        )
        return dataclasses.replace(
            ctx.runtime,
            model=chunks,
            provider_config=provider_config,
            optimizer=SimOptimizer(),
            transformer_config=chunks[0].config,
        )

    def release(self, ctx: PhaseContext) -> Runtime:
        return dataclasses.replace(
            ctx.runtime, model=None, optimizer=None, provider_config=None, transformer_config=None
        )


class _Callbacks(_Phase):
    def build(self, ctx: PhaseContext) -> Runtime:
        ctx.side_effect(SideEffect.CALLBACKS)
        target = ctx.runtime.transformer_config
        assert target is not None  # guarded by model_is_built
        done = install(target, {slot: _finalize for slot in SLOTS})
        report = BindingReport(
            target_type=type(target).__name__,
            target_id=hex(id(target)),
            scheduler_config_id=hex(id(target)),
            provider_config_id=hex(id(ctx.runtime.provider_config)),
            copied=target is not ctx.runtime.provider_config,
            slots=tuple(done.installed),
            chunks=1,
            optimizer=True,
            overlap_grad_reduce=False,
            overlap_param_gather=False,
            align_grad_reduce=True,
            align_param_gather=False,
            policy="refuse",
            target_ref=weakref.ref(target),
            installed_ids=MappingProxyType({s: id(v) for s, v in done.installed.items()}),
        )
        fields = report.log_fields()
        ctx.emit(records.CallbacksBound(**fields))
        return dataclasses.replace(ctx.runtime, binding=report)

    def release(self, ctx: PhaseContext) -> Runtime:
        rt = ctx.runtime
        if rt.binding is not None and rt.transformer_config is not None:
            for slot in SLOTS:
                setattr(rt.transformer_config, slot, None)
            ctx.emit(records.CallbacksUnbound(target_id=hex(id(rt.transformer_config)), slots=list(SLOTS)))
        return dataclasses.replace(rt, binding=None)
