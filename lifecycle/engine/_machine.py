"""Build a `transitions` machine from `states.TABLE`: one event per trigger, guards as conditions.

Conditions raise `GuardRejected` instead of returning False, so a refused trigger is never silent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from transitions.extensions import LockedMachine

from states import STARTUP_ORDER, TABLE, State, Transition

if TYPE_CHECKING:
    from transitions import EventData


class MachineModel:
    """The object `transitions` drives; `state` is the current `State`."""

    state: State


def build_machine(
    model: MachineModel,
    *,
    on_guard: Callable[[Transition], Callable[[EventData | None], bool]],
    table: tuple[Transition, ...] = TABLE,
) -> LockedMachine:
    """A thread-safe machine over `model` with exactly the table's rows (no auto transitions)."""
    machine = LockedMachine(
        model=model,
        states=list(State),
        initial=STARTUP_ORDER[0],
        auto_transitions=False,
        send_event=True,
        ignore_invalid_triggers=False,
        model_override=False,
    )
    for row in table:
        machine.add_transition(
            trigger=row.trigger.value,
            source=list(row.sources),
            dest=row.dest,
            # one condition per row that checks the row's guards in order (each extra callback costs
            # a trip through LockedMachine's proxies)
            conditions=[on_guard(row)] if row.guards else [],
        )
    return machine


def build_raw_machine(model: MachineModel, table: tuple[Transition, ...] = TABLE) -> LockedMachine:
    """The same table on a bare machine: no guards, no entry work, no log (the benchmark baseline)."""
    machine = LockedMachine(
        model=model, states=list(State), initial=STARTUP_ORDER[0], auto_transitions=False, send_event=True
    )
    for row in table:
        machine.add_transition(trigger=row.trigger.value, source=list(row.sources), dest=row.dest)
    return machine
