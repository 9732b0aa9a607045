"""Errors raised by megatron-lifecycle.

    LifecycleError
    ├── ConfigError (ValueError)            a config value or file is wrong; lists every problem
    ├── InvalidTransition (RuntimeError)    the table has no such trigger from this state
    ├── GuardRejected (RuntimeError)        an ordering rule refused the trigger
    ├── SideEffectError (RuntimeError)      a side effect outside its owning transition
    │   ├── SideEffectBeforeValidation      ... before VALIDATED
    │   ├── TripwireViolation               ... caught by a tripwire (any code, not only ours)
    │   └── DistributedError                ... already done outside: a second initialization
    ├── ConfigMutated (RuntimeError)        the validated config changed after VALIDATED
    ├── PhaseFailed (RuntimeError)          a state's entry work raised; the lifecycle is FAILED
    ├── BindingError (RuntimeError)         callbacks could not be bound or verified
    │   └── BindingConflict                 a slot already holds a different callable
    ├── FinalizerNotCalled (RuntimeError)   the first training step did not finalize gradients
    ├── RehearsalError (RuntimeError)       a CPU rehearsal nested, or closed on the wrong thread
    ├── LogUnreadable (ValueError)          a startup log cannot be read (`lifecycle audit` exits 2)
    └── ExtraNotInstalled (ImportError)     an optional dependency is missing; names the pip extra

Every error keeps its context in keyword-only attributes and pickles across processes.
"""

from __future__ import annotations

from typing import Any


class LifecycleError(Exception):
    """Base of every error this project raises."""

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = context
        for key, value in context.items():
            setattr(self, key, value)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.context))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[LifecycleError], message: str, context: dict[str, Any]) -> LifecycleError:
    return cls(message, **context)


class ConfigError(LifecycleError, ValueError):
    """A config value or file is wrong. `problems` lists every one found."""

    problems: list[Any]
    field: str | None


class InvalidTransition(LifecycleError, RuntimeError):
    """The transition table has no row for this trigger from this state."""


class GuardRejected(LifecycleError, RuntimeError):
    """A guard's ordering rule refused the trigger."""


class SideEffectError(LifecycleError, RuntimeError):
    """A side effect was attempted outside the transition that owns it."""


class SideEffectBeforeValidation(SideEffectError):
    """A side effect was attempted before the config was validated."""


class TripwireViolation(SideEffectError):
    """A tripwire caught a call made outside its owning transition."""


class ConfigMutated(LifecycleError, RuntimeError):
    """The validated config (or the megatron config built from it) changed after VALIDATED."""


class PhaseFailed(LifecycleError, RuntimeError):
    """A state's entry work raised; the lifecycle entered FAILED. The cause is chained."""


class BindingError(LifecycleError, RuntimeError):
    """Callbacks could not be bound to, or verified on, the scheduler's config."""


class BindingConflict(BindingError):
    """A callback slot already holds a different callable and no policy was chosen."""


class FinalizerNotCalled(LifecycleError, RuntimeError):
    """The first training step ran without calling finalize_model_grads exactly once."""


class RehearsalError(LifecycleError, RuntimeError):
    """A CPU rehearsal was started twice, or closed from the wrong thread or out of order."""


class DistributedError(SideEffectError):
    """The process group or megatron's parallel state already exists, created outside this
    lifecycle: a second initialization is refused."""


class LogUnreadable(LifecycleError, ValueError):
    """A startup log line cannot be read: `source`, `line` and `reason` say where and why."""


class ExtraNotInstalled(LifecycleError, ImportError):
    """An optional dependency is missing; the message names the `pip install` extra that adds it."""
