"""Side-effect rules of a lifecycle: declared side effects and tripwire calls, checked against their
owning transition (`states.SIDE_EFFECT_OWNERS`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lifecycle.errors import SideEffectBeforeValidation, SideEffectError, TripwireViolation
from lifecycle.log import events
from states import SIDE_EFFECT_OWNERS, SideEffect

if TYPE_CHECKING:
    from lifecycle.engine._shared import Shared
    from lifecycle.runtime import Runtime


class SideEffectRules:
    """A part of `Lifecycle`: what `ctx.side_effect(kind)` and the tripwires call (the tripwires'
    owner while they are armed for this lifecycle)."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    def declare(self, kind: SideEffect, runtime: Runtime | None = None) -> None:
        """A phase's declared side effect: logged when the running transition owns it, else refused."""
        owner = SIDE_EFFECT_OWNERS[kind]
        shared = self.shared
        rt = runtime or shared.runtime
        active = shared.active
        if rt.validated and active is owner:
            shared.log.emit(events.SIDE_EFFECT, kind=kind.value, trigger=owner.value)
            return
        if not rt.validated:
            reason = f"{kind.value} before VALIDATED: call validate() first; it belongs to {owner.value}()"
            error: type[SideEffectError] = SideEffectBeforeValidation
        else:
            where = f"during {active.value}()" if active else "between transitions"
            reason = f"{kind.value} {where}: it belongs to {owner.value}()"
            error = SideEffectError
        shared.log.emit(
            events.SIDE_EFFECT_REFUSED,
            kind=kind.value,
            trigger=active.value if active else None,
            owner=owner.value,
            state=shared.state.name,
            reason=reason,
        )
        raise error(f"refused: {reason}", kind=kind, owner=owner, state=shared.state, trigger=active)

    def tripwire(self, kind: SideEffect, target: str) -> None:
        """A patched library call (`target`) of `kind`: logged when allowed now, else a violation."""
        owner = SIDE_EFFECT_OWNERS[kind]
        shared = self.shared
        if shared.active is owner and shared.runtime.validated:
            shared.log.emit(events.SIDE_EFFECT, kind=kind.value, trigger=owner.value)
            return
        active = shared.active.value if shared.active else None
        shared.log.emit(
            events.TRIPWIRE_VIOLATION,
            target=target,
            kind=kind.value,
            owner=owner.value,
            state=shared.state.name,
            trigger=active,
            policy=shared.policy,
        )
        if shared.policy == "raise":
            where = f"during {active}()" if active else f"in state {shared.state.name}"
            raise TripwireViolation(
                f"{target} was called {where}, outside the transition that owns it: {kind.value} belongs to "
                f"Lifecycle.{owner.value}(). Let the lifecycle do it (lc.advance_to(...)), or pass "
                "tripwires='warn' to only log it.",
                target=target,
                kind=kind,
                owner=owner,
                state=shared.state,
                trigger=active,
            )
