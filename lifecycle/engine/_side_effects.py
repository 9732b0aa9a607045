"""Side-effect rules of a lifecycle: declared side effects and tripwire calls, checked against their
owning transition (`states.SIDE_EFFECT_OWNERS`) and the ordering rules (`states.ORDERING`, read
through `states.unmet`: the same rules the guards, the audit and `testing.check_log` read)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lifecycle.engine._guarding import facts_of
from lifecycle.errors import SideEffectBeforeValidation, SideEffectError, TripwireViolation
from lifecycle.log import records
from states import SIDE_EFFECT_OWNERS, SIDE_EFFECTS_NEED_VALIDATION, Ordering, SideEffect, unmet

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
        active = shared.active
        broken = self._broken(kind, runtime)
        if broken is None and active is owner:
            shared.log.write(records.SideEffect(kind=kind.value, trigger=owner.value))
            return
        error: type[SideEffectError] = SideEffectError
        if broken is SIDE_EFFECTS_NEED_VALIDATION:
            reason = f"{kind.value} before VALIDATED: call validate() first; it belongs to {owner.value}()"
            error = SideEffectBeforeValidation
        elif active is not owner:
            where = f"during {active.value}()" if active else "between transitions"
            reason = f"{kind.value} {where}: it belongs to {owner.value}()"
        else:
            assert broken is not None
            reason = f"{kind.value} before {broken.needs.name}: {broken.says}"
        shared.log.write(
            records.SideEffectRefused(
                kind=kind.value,
                trigger=active.value if active else None,
                owner=owner.value,
                state=shared.state.name,
                reason=reason,
            )
        )
        raise error(f"refused: {reason}", kind=kind, owner=owner, state=shared.state, trigger=active)

    def tripwire(self, kind: SideEffect, target: str) -> None:
        """A patched library call (`target`) of `kind`: logged when allowed now, else a violation."""
        owner = SIDE_EFFECT_OWNERS[kind]
        shared = self.shared
        if shared.active is owner and self._broken(kind) is None:
            shared.log.write(records.SideEffect(kind=kind.value, trigger=owner.value))
            return
        active = shared.active.value if shared.active else None
        shared.log.write(
            records.TripwireViolation(
                target=target,
                kind=kind.value,
                owner=owner.value,
                state=shared.state.name,
                trigger=active,
                policy=shared.policy,
            )
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

    def _broken(self, kind: SideEffect, runtime: Runtime | None = None) -> Ordering | None:
        """The ordering rule a side effect of `kind` would break now (`runtime`: the entry work's)."""
        return unmet(kind, facts_of(self.shared, SIDE_EFFECT_OWNERS[kind], runtime=runtime))
