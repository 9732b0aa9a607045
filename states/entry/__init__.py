"""Each state's entry work on real megatron-core, one module per state, assembled into a PhaseSet.

Modules: `validated`, `services_ready`, `distributed`, `model_built`, `callbacks_bound`. Each has
`enter(ctx) -> Runtime`; those that build something have `release(ctx, runtime) -> Runtime`.
They are imported when their transition runs, so `import states` stays free of torch and megatron.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from lifecycle.phases import PhaseContext, Runtime
from states._enums import State

_MODULES: tuple[tuple[State, str], ...] = (
    (State.VALIDATED, "validated"),
    (State.SERVICES_READY, "services_ready"),
    (State.DISTRIBUTED, "distributed"),
    (State.MODEL_BUILT, "model_built"),
    (State.CALLBACKS_BOUND, "callbacks_bound"),
)


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"states.entry.{name}")


class MegatronPhases:
    """The real phases. `release(keep)` undoes, newest first, every state after `keep`."""

    def validate(self, ctx: PhaseContext) -> Runtime:
        return _enter("validated", ctx)

    def start_services(self, ctx: PhaseContext) -> Runtime:
        return _enter("services_ready", ctx)

    def init_distributed(self, ctx: PhaseContext) -> Runtime:
        return _enter("distributed", ctx)

    def build_model(self, ctx: PhaseContext) -> Runtime:
        return _enter("model_built", ctx)

    def bind_callbacks(self, ctx: PhaseContext) -> Runtime:
        return _enter("callbacks_bound", ctx)

    def release(self, ctx: PhaseContext, keep: State) -> Runtime:
        runtime = ctx.runtime
        errors: list[BaseException] = []
        for state, name in reversed(_MODULES):
            if state.startup_index <= keep.startup_index:
                break
            module = _module(name)
            release = getattr(module, "release", None)
            if release is None:
                continue
            try:
                runtime = release(ctx, runtime)
            except Exception as exc:  # keep releasing the rest; report the first failure
                errors.append(exc)
        if errors:
            raise errors[0]
        return runtime


    def drift(self, runtime: Runtime) -> list[tuple[str, Any, Any]]:
        """Fields of the model's TransformerConfig changed since MODEL_BUILT (callback slots excepted)."""
        snapshot = runtime.extras.get("transformer_config_snapshot")
        if snapshot is None or runtime.transformer_config is None:
            return []
        from lifecycle.drift import CALLBACK_FIELDS, config_drift

        changes = config_drift(snapshot, runtime.transformer_config, ignore=CALLBACK_FIELDS)
        return [(f"transformer_config.{name}", old, new) for name, old, new in changes]


def _enter(name: str, ctx: PhaseContext) -> Runtime:
    result: Any = _module(name).enter(ctx)
    if not isinstance(result, Runtime):
        raise TypeError(f"states.entry.{name}.enter returned {type(result).__name__}, not Runtime")
    return result


__all__ = ["MegatronPhases"]
