"""The guards of `Lifecycle`: the table's guards checked on the facts of now, and the refusals (a
trigger the table does not define from here, a guard that says no), each logged and raised."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lifecycle.errors import GuardRejected, InvalidTransition
from lifecycle.log import records
from states import Facts, Guard, State, Transition, Trigger, allowed_triggers, rule

if TYPE_CHECKING:
    from lifecycle.engine._shared import Shared
    from lifecycle.runtime import Runtime


class Guards:
    """A part of `Lifecycle`: the table's guards, checked once per transition on the facts of now."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    def check(self, row: Transition) -> None:
        """Every guard of `row` on the facts of now, in order: the first that refuses is logged and raised."""
        if not row.guards:
            return
        facts = self.facts(row.trigger, row.dest)
        for guard in row.guards:
            if not guard(facts):
                self._reject(row, guard, facts)

    def undefined(self, trigger: Trigger, source: State) -> None:
        """`trigger` has no row from `source`: logged, and raised as InvalidTransition."""
        allowed = allowed_triggers(source)
        self.shared.log.write(
            records.InvalidTransition(trigger=trigger.value, source=source.name, allowed=[t.value for t in allowed])
        )
        raise InvalidTransition(
            f"{trigger.value} is not defined from {source.name}; allowed from there: "
            f"{', '.join(t.value for t in allowed) or 'nothing (terminal)'}",
            state=source,
            trigger=trigger,
            allowed=allowed,
        )

    def _reject(self, row: Transition, guard: Guard, facts: Facts) -> None:
        reason = rule(guard)
        self.shared.log.write(
            records.GuardRejected(
                trigger=row.trigger.value, source=facts.state.name, guard=guard.__name__, reason=reason
            )
        )
        if facts.state is State.FAILED and not facts.config_validated:
            reason += "; nothing was validated (validate failed): fix the config and create a new Lifecycle with it"
        raise GuardRejected(
            f"{row.trigger.value} refused in {facts.state.name} by {guard.__name__}: {reason}",
            state=facts.state,
            trigger=row.trigger,
            guard=guard.__name__,
            reason=reason,
        )

    def facts(self, trigger: Trigger, dest: State) -> Facts:
        return facts_of(self.shared, trigger, dest=dest)


def facts_of(shared: Shared, trigger: Trigger, *, dest: State | None = None, runtime: Runtime | None = None) -> Facts:
    """The facts of now: `runtime` (the lifecycle's by default) says which states' work exists."""
    rt = runtime or shared.runtime
    return Facts(
        state=shared.state,
        trigger=trigger,
        dest=dest,
        plan=shared.plan,
        config_validated=rt.validated,
        services_ready=rt.services_ready,
        distributed=rt.distributed,
        model_built=rt.model is not None,
        generation=rt.generation,
    )
