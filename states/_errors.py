"""The root of the error tree and the errors of the transition table itself.

    LifecycleError                          (states)    base of every error this project raises
    ├── InvalidTransition (RuntimeError)    (states)    the table has no such trigger from this state
    ├── GuardRejected (RuntimeError)        (states)    an ordering rule refused the trigger
    ├── BindingError ... FinalizerNotCalled (bindings)  see bindings/_errors.py
    └── ConfigError ... RankFailed          (lifecycle) see lifecycle/errors.py

Every error keeps its context in keyword-only attributes, which each class declares (a test checks
every raise against the declarations), and pickles across processes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from states._enums import State, Trigger


class LifecycleError(Exception):
    """Base of every error this project raises."""

    def __init__(self, message: str, **context: object) -> None:
        super().__init__(message)
        self.message = message
        self.context = context
        for key, value in context.items():
            setattr(self, key, value)

    def __reduce__(self) -> tuple[Callable[..., LifecycleError], tuple[object, ...]]:
        return (_rebuild, (type(self), self.message, self.context))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[LifecycleError], message: str, context: dict[str, object]) -> LifecycleError:
    return cls(message, **context)


class InvalidTransition(LifecycleError, RuntimeError):
    """The transition table has no row for this trigger from this state."""

    state: State
    trigger: Trigger | str
    """The trigger asked for: a `Trigger`, or the text given when it names none (or `advance_to`)."""
    allowed: tuple[Trigger, ...]


class GuardRejected(LifecycleError, RuntimeError):
    """A guard's ordering rule refused the trigger."""

    state: State
    trigger: Trigger
    guard: str
    reason: str
