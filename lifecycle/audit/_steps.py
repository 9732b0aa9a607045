"""Rules on training steps (LA030, LA031): steps need the callbacks bound, and each binding's first
step needs the watchdog's record. Called from the per-event handlers in `_handlers`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lifecycle.audit._rules import RuleId

if TYPE_CHECKING:
    from lifecycle.audit._state import RankState as RankAudit


def on_step(audit: RankAudit) -> None:
    """A `step_completed`: in a plan that binds callbacks, only in its training state (LA030)."""
    if audit.state == audit.trains:
        audit.bound_steps += 1
    elif audit.trains is not None:
        audit.flag(
            RuleId.STEP_WITHOUT_BINDING,
            f"a training step was logged in state {audit.state} of generation "
            f"{audit.generation}, not {audit.trains}: the schedule ran without the bound "
            "callbacks, so gradients were not finalized by the lifecycle's binding",
        )


def on_first_step(audit: RankAudit) -> None:
    """`first_step_finalized` or `first_step_not_finalized`: the watchdog checked this binding."""
    audit.first_step_logged = True


def on_bound(audit: RankAudit) -> None:
    """A new binding: close the previous one, then count its steps from zero."""
    close_binding(audit)
    audit.bound_steps, audit.first_step_logged, audit.fresh_group = 0, False, None


def close_binding(audit: RankAudit) -> None:
    """End of a binding (unbound, rebound, end of log): steps without the watchdog's record (LA031)."""
    if audit.bound_steps and not audit.first_step_logged:
        audit.flag(
            RuleId.FIRST_STEP_UNCHECKED,
            f"{audit.bound_steps} training step(s) ran on the binding of generation "
            f"{audit.generation} with no first_step_finalized record: the first-step watchdog "
            "never checked that finalize_model_grads ran",
        )
    audit.bound_steps, audit.first_step_logged = 0, True
