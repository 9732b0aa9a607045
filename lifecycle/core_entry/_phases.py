"""`MegatronPhases`: each state's entry work on real megatron-core (one module per state), as a PhaseSet.

Modules: `validated`, `services_ready`, `distributed`, `model_built`, `callbacks_bound`. Each has
`enter(ctx) -> Runtime`; those that build something have `release(ctx, runtime) -> Runtime`. The
registry makes each a phase of its state (`Work`).
They import torch and megatron inside their functions, so importing them stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from lifecycle.config import CALLBACK_FIELDS, Change, config_drift
from lifecycle.core_entry import callbacks_bound, distributed, model_built, services_ready, validated
from lifecycle.core_entry._imports import validate_while_importing
from lifecycle.core_entry.resources import SETTLE_S, resources
from lifecycle.rankwatch import mark_failed, watched
from lifecycle.runtime import Phase, PhaseContext, Phases, Runtime, Work
from states import State

Release = Callable[[PhaseContext, Runtime], Runtime]


def _undo(release: Release) -> Callable[[PhaseContext], Runtime]:
    return lambda ctx: release(ctx, ctx.runtime)


def _validate(ctx: PhaseContext) -> Runtime:
    """Validate while the heavy imports run on a thread (one `imports` record; see _imports.py)."""
    return validate_while_importing(ctx, validated.enter, environment=validated.environment_checks(ctx))


def _watched(state: State, enter: Callable[[PhaseContext], Runtime]) -> Callable[[PhaseContext], Runtime]:
    """`enter` under the rank watch: its deadline and the failure broadcast (lifecycle.rankwatch)."""

    def run(ctx: PhaseContext) -> Runtime:
        with watched(ctx, state.name):
            return enter(ctx)

    return run


PHASES: Mapping[State, Phase] = MappingProxyType(
    {
        State.VALIDATED: Work(_validate),
        State.SERVICES_READY: Work(services_ready.enter, _undo(services_ready.release)),
        State.DISTRIBUTED: Work(distributed.enter, _undo(distributed.release)),
        State.MODEL_BUILT: Work(_watched(State.MODEL_BUILT, model_built.enter), _undo(model_built.release)),
        State.CALLBACKS_BOUND: Work(
            _watched(State.CALLBACKS_BOUND, callbacks_bound.enter), _undo(callbacks_bound.release)
        ),
    }
)
"""The real phase of each state, read-only, as each `MegatronPhases` registers it when made
(`lifecycle.core_entry.PHASES`). To wrap one (a fault injected into a real state), wrap the registry
you run, `MegatronPhases().around(State.X, release=...)`, and pass it: `Lifecycle(..., phases=...)`,
or under `lifecycle run`, `--phases package.module:function` naming a function that returns it."""


class MegatronPhases(Phases):
    """The real phases: one module per state (`PHASES`), registered for it."""

    settle_s: float = SETTLE_S
    """Seconds the ledger probes a release's survivors again before calling them leaks."""

    def __init__(self) -> None:
        super().__init__(PHASES)

    def failed(self, runtime: Runtime, state: str, reason: str) -> None:
        """The lifecycle moved to FAILED: tell the other ranks (and skip the closing barrier)."""
        mark_failed(runtime.rank_watch, state, reason)

    def resources(self, state: State, runtime: Runtime) -> list[tuple[str, Callable[[], bool]]]:
        """What `state`'s entry work made, with a probe each (the engine's ledger)."""
        return resources(state, runtime)

    def drift(self, runtime: Runtime) -> list[Change]:
        """Fields of the model's TransformerConfig changed since MODEL_BUILT (callback slots excepted)."""
        snapshot = runtime.transformer_config_snapshot
        if snapshot is None or runtime.transformer_config is None:
            return []
        changes = config_drift(snapshot, runtime.transformer_config, ignore=CALLBACK_FIELDS)
        return [Change(f"transformer_config.{name}", old, new) for name, old, new in changes]
