"""Side-effect rules of a lifecycle: declared side effects and tripwire calls, checked against their
owning transition (`states.SIDE_EFFECT_OWNERS`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lifecycle.errors import SideEffectBeforeValidation, SideEffectError, TripwireViolation
from lifecycle.log import events
from states import SIDE_EFFECT_OWNERS, SideEffect

if TYPE_CHECKING:
    from lifecycle.log import AuditLog
    from lifecycle.runtime import Runtime
    from states import State, Trigger


class SideEffectRules:
    """Mixed into `Lifecycle`: what `ctx.side_effect(kind)` and the tripwires call."""

    _active: Trigger | None
    _runtime: Runtime
    _log: AuditLog
    policy: str

    @property
    def state(self) -> State:
        raise NotImplementedError

    def _declare_side_effect(self, kind: SideEffect, runtime: Runtime | None = None) -> None:
        owner = SIDE_EFFECT_OWNERS[kind]
        rt = runtime or self._runtime
        active = self._active
        if rt.validated and active is owner:
            self._log.emit(events.SIDE_EFFECT, kind=kind.value, trigger=owner.value)
            return
        if not rt.validated:
            reason = f"{kind.value} before VALIDATED: call validate() first; it belongs to {owner.value}()"
            error: type[SideEffectError] = SideEffectBeforeValidation
        else:
            where = f"during {active.value}()" if active else "between transitions"
            reason = f"{kind.value} {where}: it belongs to {owner.value}()"
            error = SideEffectError
        self._log.emit(
            events.SIDE_EFFECT_REFUSED,
            kind=kind.value,
            trigger=active.value if active else None,
            owner=owner.value,
            state=self.state.name,
            reason=reason,
        )
        raise error(f"refused: {reason}", kind=kind, owner=owner, state=self.state, trigger=active)

    def _tripwire(self, kind: SideEffect, target: str) -> None:
        owner = SIDE_EFFECT_OWNERS[kind]
        if self._active is owner and self._runtime.validated:
            self._log.emit(events.SIDE_EFFECT, kind=kind.value, trigger=owner.value)
            return
        active = self._active.value if self._active else None
        self._log.emit(
            events.TRIPWIRE_VIOLATION,
            target=target,
            kind=kind.value,
            owner=owner.value,
            state=self.state.name,
            trigger=active,
            policy=self.policy,
        )
        if self.policy == "raise":
            where = f"during {active}()" if active else f"in state {self.state.name}"
            raise TripwireViolation(
                f"{target} was called {where}, outside the transition that owns it: {kind.value} belongs to "
                f"Lifecycle.{owner.value}(). Let the lifecycle do it (lc.advance_to(...)), or pass "
                "tripwires='warn' to only log it.",
                target=target,
                kind=kind,
                owner=owner,
                state=self.state,
                trigger=active,
            )
