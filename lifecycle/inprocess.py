"""Light in-process phases: the real engine, guards and log, with simulated Megatron objects.

For the engine's own tests, the fuzzer and the overhead benchmark. They declare the same side
effects as the real phases, build a model whose chunks hold a copy of the provider's config (as a
copying provider would) and bind to `model[0].config`, so their logs have the real shape.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from lifecycle import events
from lifecycle.phases import PhaseContext, Runtime
from states import SideEffect, State

SLOTS = ("finalize_model_grads_func", "grad_scale_func")


@dataclass
class SimConfig:
    """Stands in for a TransformerConfig: the attributes bindings write."""

    num_layers: int = 2
    finalize_model_grads_func: Any = None
    grad_scale_func: Any = None


@dataclass
class SimChunk:
    config: SimConfig = field(default_factory=SimConfig)


def copying_provider(config: SimConfig, *, pre_process: bool, post_process: bool, vp_stage: int | None) -> SimChunk:
    """Copies its config into the model, like Nemotron Omni's provider (its fields are flat)."""
    return SimChunk(config=copy.copy(config))


def _finalize(*_args: Any, **_kwargs: Any) -> None:
    return None


class InProcessPhases:
    """A PhaseSet with no torch or megatron: every side effect is declared, none is performed."""

    def __init__(self, *, fail_on: str | None = None) -> None:
        self.fail_on = fail_on
        self.calls: list[str] = []

    def _maybe_fail(self, name: str) -> None:
        self.calls.append(name)
        if self.fail_on == name:
            raise RuntimeError(f"injected failure in {name}")

    def validate(self, ctx: PhaseContext) -> Runtime:
        self._maybe_fail("validate")
        return ctx.runtime

    def start_services(self, ctx: PhaseContext) -> Runtime:
        self._maybe_fail("start_services")
        ctx.side_effect(SideEffect.TOKENIZER)
        vocab = ctx.runtime.config.model.vocab_size or ctx.runtime.config.tokenizer.vocab_size
        ctx.emit(events.SERVICES_READY, tokenizer="SimTokenizer", vocab_size=vocab, vocab_source="tokenizer")
        return dataclasses.replace(ctx.runtime, services_ready=True, tokenizer="sim", vocab_size=vocab,
                                   vocab_source="tokenizer")

    def init_distributed(self, ctx: PhaseContext) -> Runtime:
        self._maybe_fail("init_distributed")
        for kind in (SideEffect.PROCESS_GROUP, SideEffect.PARALLEL_STATE, SideEffect.RNG):
            ctx.side_effect(kind)
        p = ctx.runtime.config.parallel
        ctx.emit(events.DISTRIBUTED_INITIALIZED, backend="sim", tp=p.tp, pp=p.pp, cp=p.cp, ep=p.ep,
                 dp=max(1, ctx.runtime.world_size // (p.tp * p.pp * p.cp)), vpp=p.vpp)
        return dataclasses.replace(ctx.runtime, distributed=True, backend="sim")

    def build_model(self, ctx: PhaseContext) -> Runtime:
        self._maybe_fail("build_model")
        ctx.side_effect(SideEffect.MODEL)
        provider = ctx.provider or copying_provider
        provider_config = SimConfig(num_layers=ctx.runtime.config.model.num_layers)
        chunks = tuple(
            provider(provider_config, pre_process=True, post_process=True, vp_stage=None) for _ in range(1)
        )
        ctx.emit(events.MODEL_BUILT, chunks=len(chunks), model_config_id=hex(id(chunks[0].config)),
                 provider_config_id=hex(id(provider_config)), optimizer=True)
        return dataclasses.replace(ctx.runtime, model=chunks, provider_config=provider_config, optimizer="sim")

    def bind_callbacks(self, ctx: PhaseContext) -> Runtime:
        self._maybe_fail("bind_callbacks")
        ctx.side_effect(SideEffect.CALLBACKS)
        model = ctx.runtime.model
        assert model is not None  # guarded by model_is_built
        target = model[0].config
        target.finalize_model_grads_func = _finalize
        target.grad_scale_func = _finalize
        ctx.emit(events.CALLBACKS_BOUND, target_type=type(target).__name__, target_id=hex(id(target)),
                 scheduler_config_id=hex(id(target)), provider_config_id=hex(id(ctx.runtime.provider_config)),
                 copied=target is not ctx.runtime.provider_config, slots=list(SLOTS), chunks=len(model),
                 overlap_grad_reduce=False, overlap_param_gather=False, policy="refuse")
        return dataclasses.replace(ctx.runtime, binding={"target_id": id(target), "slots": SLOTS})

    def release(self, ctx: PhaseContext, keep: State) -> Runtime:
        rt = ctx.runtime
        if rt.binding is not None and rt.model:
            for slot in SLOTS:
                setattr(rt.model[0].config, slot, None)
            ctx.emit(events.CALLBACKS_UNBOUND, target_id=hex(id(rt.model[0].config)), slots=list(SLOTS))
        rt = dataclasses.replace(rt, model=None, optimizer=None, binding=None, provider_config=None)
        if keep.startup_index < State.DISTRIBUTED.startup_index:
            rt = dataclasses.replace(rt, distributed=False, backend=None)
        if keep.startup_index < State.SERVICES_READY.startup_index:
            rt = dataclasses.replace(rt, services_ready=False, tokenizer=None, vocab_size=None, vocab_source=None)
        return rt
