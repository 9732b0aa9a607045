"""The transition table, as data. The engine, the diagram and the exhaustive check all read it."""

from __future__ import annotations

from dataclasses import dataclass

from states._enums import STARTUP_ORDER, State, Trigger
from states._guards import (
    Guard,
    config_is_validated,
    distributed_is_initialized,
    model_is_built,
    plan_allows_restart,
    plan_reaches_destination,
    services_are_ready,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Transition:
    """One row: `trigger` moves any of `sources` to `dest` when every guard holds."""

    sources: tuple[State, ...]
    trigger: Trigger
    dest: State
    guards: tuple[Guard, ...] = ()
    keeps: State | None = None
    """For a row that releases: the startup state whose work survives (with every state before it);
    the work of each state after it is released, newest first. None: the row releases nothing."""
    doc: str = ""


_LIVE = (*STARTUP_ORDER, State.FAILED)

TABLE: tuple[Transition, ...] = (
    Transition(
        sources=(State.CONFIGURED,),
        trigger=Trigger.VALIDATE,
        dest=State.VALIDATED,
        doc="Check the config (intrinsic, and environment unless the plan is offline); freeze and fingerprint it.",
    ),
    Transition(
        sources=(State.VALIDATED,),
        trigger=Trigger.START_SERVICES,
        dest=State.SERVICES_READY,
        guards=(config_is_validated, plan_reaches_destination),
        doc="Tokenizer, vocab resolution, writers: after validation, before distributed and RNG.",
    ),
    Transition(
        sources=(State.SERVICES_READY,),
        trigger=Trigger.INIT_DISTRIBUTED,
        dest=State.DISTRIBUTED,
        guards=(config_is_validated, services_are_ready, plan_reaches_destination),
        doc="Process group, model-parallel state, RNG seeding.",
    ),
    Transition(
        sources=(State.DISTRIBUTED,),
        trigger=Trigger.BUILD_MODEL,
        dest=State.MODEL_BUILT,
        guards=(distributed_is_initialized, plan_reaches_destination),
        doc="Provider per virtual-pipeline chunk, DDP wrap, optimizer.",
    ),
    Transition(
        sources=(State.MODEL_BUILT,),
        trigger=Trigger.BIND_CALLBACKS,
        dest=State.CALLBACKS_BOUND,
        guards=(model_is_built, plan_reaches_destination),
        doc="Install the training callbacks on the config the scheduler reads, and verify.",
    ),
    Transition(
        sources=(State.MODEL_BUILT, State.CALLBACKS_BOUND),
        trigger=Trigger.REBUILD,
        dest=State.DISTRIBUTED,
        guards=(distributed_is_initialized,),
        keeps=State.DISTRIBUTED,
        doc="Unbind, drop model and optimizer; keep services and process groups.",
    ),
    Transition(
        sources=(State.SERVICES_READY, State.DISTRIBUTED, State.MODEL_BUILT, State.CALLBACKS_BOUND, State.FAILED),
        trigger=Trigger.RESTART,
        dest=State.VALIDATED,
        guards=(config_is_validated, plan_allows_restart),
        keeps=State.VALIDATED,
        doc="Tear down to the validated config and start a new generation.",
    ),
    Transition(
        sources=_LIVE[:-1],
        trigger=Trigger.FAIL,
        dest=State.FAILED,
        doc="Record a failure; the lifecycle can then restart or shut down.",
    ),
    Transition(
        sources=_LIVE,
        trigger=Trigger.SHUTDOWN,
        dest=State.SHUT_DOWN,
        keeps=State.CONFIGURED,
        doc="Release everything the lifecycle created, in reverse order.",
    ),
)


def allowed_triggers(state: State) -> tuple[Trigger, ...]:
    """Triggers defined from `state` (guards not evaluated)."""
    return tuple(row.trigger for row in TABLE if state in row.sources)


def forward_trigger(dest: State) -> Trigger:
    """The trigger that moves the startup one step forward into `dest` (read from the table)."""
    index = dest.startup_index
    if index < 1:
        raise ValueError(f"{dest.name} is not reached by a forward startup step")
    previous = STARTUP_ORDER[index - 1]
    for row in TABLE:
        if row.dest is dest and previous in row.sources:
            return row.trigger
    raise ValueError(f"the table has no forward step into {dest.name}")


def find(state: State, trigger: Trigger) -> Transition | None:
    """The row for `trigger` from `state`, or None when the table has none."""
    for row in TABLE:
        if row.trigger is trigger and state in row.sources:
            return row
    return None
