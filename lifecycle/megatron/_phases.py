"""`MegatronPhases`: each state's entry work on real megatron-core (one module per state), as a PhaseSet.

Modules: `validated`, `services_ready`, `distributed`, `model_built`, `callbacks_bound`. Each has
`enter(ctx) -> Runtime`; those that build something have `release(ctx, runtime) -> Runtime`.
They import torch and megatron inside their functions, so importing them stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lifecycle.config import CALLBACK_FIELDS, config_drift
from lifecycle.megatron import callbacks_bound, distributed, model_built, services_ready, validated
from lifecycle.megatron._imports import validate_while_importing
from lifecycle.megatron.ranks import mark_failed, watched
from lifecycle.megatron.resources import resources
from lifecycle.runtime import PhaseContext, Runtime
from states import State

Release = Callable[[PhaseContext, Runtime], Runtime]

# What each state built, newest last: `release` walks it backwards.
RELEASES: tuple[tuple[State, Release], ...] = (
    (State.SERVICES_READY, services_ready.release),
    (State.DISTRIBUTED, distributed.release),
    (State.MODEL_BUILT, model_built.release),
    (State.CALLBACKS_BOUND, callbacks_bound.release),
)


class MegatronPhases:
    """The real phases. `release(keep)` undoes, newest first, every state after `keep`."""

    def validate(self, ctx: PhaseContext) -> Runtime:
        """Validate while the heavy imports run on a thread (one `imports` record; see _imports.py)."""
        return validate_while_importing(ctx, validated.enter, environment=validated.environment_checks(ctx))

    def start_services(self, ctx: PhaseContext) -> Runtime:
        return services_ready.enter(ctx)

    def init_distributed(self, ctx: PhaseContext) -> Runtime:
        return distributed.enter(ctx)

    def build_model(self, ctx: PhaseContext) -> Runtime:
        with watched(ctx, State.MODEL_BUILT.name):  # deadline and failure broadcast (ranks.py)
            return model_built.enter(ctx)

    def bind_callbacks(self, ctx: PhaseContext) -> Runtime:
        with watched(ctx, State.CALLBACKS_BOUND.name):
            return callbacks_bound.enter(ctx)

    def release(self, ctx: PhaseContext, keep: State) -> Runtime:
        runtime = ctx.runtime
        errors: list[BaseException] = []
        for state, release in reversed(RELEASES):
            if state.startup_index <= keep.startup_index:
                break
            try:
                runtime = release(ctx, runtime)
            except Exception as exc:  # keep releasing the rest; report the first failure
                errors.append(exc)
        if errors:
            raise errors[0]
        return runtime

    def failed(self, runtime: Runtime, state: str, reason: str) -> None:
        """The lifecycle moved to FAILED: tell the other ranks (and skip the closing barrier)."""
        mark_failed(runtime.extras, state, reason)

    def resources(self, state: State, runtime: Runtime) -> list[tuple[str, Callable[[], bool]]]:
        """What `state`'s entry work made, with a probe each (the engine's ledger)."""
        return resources(state, runtime)

    def drift(self, runtime: Runtime) -> list[tuple[str, Any, Any]]:
        """Fields of the model's TransformerConfig changed since MODEL_BUILT (callback slots excepted)."""
        snapshot = runtime.extras.get("transformer_config_snapshot")
        if not isinstance(snapshot, dict) or runtime.transformer_config is None:
            return []
        changes = config_drift(snapshot, runtime.transformer_config, ignore=CALLBACK_FIELDS)
        return [(f"transformer_config.{name}", old, new) for name, old, new in changes]
