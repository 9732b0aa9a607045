"""The root of the error tree and the errors of the transition table itself.

    LifecycleError                          (states)    base of every error this project raises
    ├── InvalidTransition (RuntimeError)    (states)    the table has no such trigger from this state
    ├── GuardRejected (RuntimeError)        (states)    an ordering rule refused the trigger
    ├── BindingError ... FinalizerNotCalled (bindings)  see bindings/_errors.py
    └── ConfigError ... RankFailed          (lifecycle) see lifecycle/errors.py

Every error keeps its context in keyword-only attributes and pickles across processes.
"""

from __future__ import annotations

from collections.abc import Callable


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


class GuardRejected(LifecycleError, RuntimeError):
    """A guard's ordering rule refused the trigger."""
