"""The guards of `Lifecycle`: the table's guards checked on the facts of now, and the refusals (a
trigger the table does not define from here, a guard that says no), each logged and raised."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from lifecycle.errors import GuardRejected, InvalidTransition
from lifecycle.log import events
from states import Facts, Guard, State, Transition, Trigger, allowed_triggers, rule

if TYPE_CHECKING:
    from transitions import EventData

    from lifecycle.engine._shared import Shared
    from lifecycle.runtime import Runtime


class Guards:
    """A part of `Lifecycle`. Its own state: the facts of the transition running now (taken once,
    before its entry work, so the machine's own check of the same guards sees the same facts)."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self._now: Facts | None = None

    @contextmanager
    def holding(self, trigger: Trigger, dest: State) -> Iterator[None]:
        """The facts of now, held while `trigger` runs."""
        self._now = self.facts(trigger, dest)
        try:
            yield
        finally:
            self._now = None

    def condition(self, row: Transition) -> Callable[[EventData | None], bool]:
        """The machine's condition for `row`: True, or the first refusing guard raises."""

        def condition(_event: EventData | None) -> bool:
            facts = self._now or self.facts(row.trigger, row.dest)
            for guard in row.guards:
                if not guard(facts):
                    self._reject(row, guard, facts)
            return True

        return condition

    def undefined(self, trigger: Trigger, source: State) -> None:
        """`trigger` has no row from `source`: logged, and raised as InvalidTransition."""
        allowed = allowed_triggers(source)
        self.shared.log.emit(
            events.INVALID_TRANSITION, trigger=trigger.value, source=source.name, allowed=[t.value for t in allowed]
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
        self.shared.log.emit(
            events.GUARD_REJECTED,
            trigger=row.trigger.value,
            source=facts.state.name,
            guard=guard.__name__,
            reason=reason,
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
