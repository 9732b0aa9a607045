"""Build a `transitions` machine from `states.TABLE`: one event per trigger, and it only holds the
state. The engine checks the guards once, before the entry work, under its own lock (`Shared.lock`,
held for the whole transition), then moves the machine: no condition, no second lock.
"""

from __future__ import annotations

from transitions import Machine
from transitions.extensions import LockedMachine

from states import STARTUP_ORDER, TABLE, State, Transition


class MachineModel:
    """The object `transitions` drives; `state` is the current `State`."""

    state: State


def build_machine(model: MachineModel, *, table: tuple[Transition, ...] = TABLE) -> Machine:
    """A machine over `model` with exactly the table's rows (no auto transitions, no conditions, no
    callbacks): the engine calls it only with `Shared.lock` held, after the row's guards passed."""
    machine = Machine(
        model=model,
        states=list(State),
        initial=STARTUP_ORDER[0],
        auto_transitions=False,
        send_event=True,
        ignore_invalid_triggers=False,
        model_override=False,
    )
    for row in table:
        machine.add_transition(trigger=row.trigger.value, source=list(row.sources), dest=row.dest)
    return machine


def build_raw_machine(model: MachineModel, table: tuple[Transition, ...] = TABLE) -> LockedMachine:
    """The same table on a bare thread-safe machine, as a user would build it: no guards, no entry
    work, no log (the benchmark baseline)."""
    machine = LockedMachine(
        model=model, states=list(State), initial=STARTUP_ORDER[0], auto_transitions=False, send_event=True
    )
    for row in table:
        machine.add_transition(trigger=row.trigger.value, source=list(row.sources), dest=row.dest)
    return machine
