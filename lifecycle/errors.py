"""Every error megatron-lifecycle raises, in one tree (each layer defines its own leaves).

    LifecycleError                          states: the root
    ├── InvalidTransition (RuntimeError)    states: the table has no such trigger from this state
    ├── GuardRejected (RuntimeError)        states: an ordering rule refused the trigger
    ├── BindingError (RuntimeError)         bindings: callbacks could not be bound or verified
    │   └── BindingConflict                 bindings: a slot already holds a different callable
    ├── FinalizerNotCalled (RuntimeError)   bindings: the first training step did not finalize gradients
    ├── ConfigError (ValueError)            a config value or file is wrong; lists every problem
    ├── SideEffectError (RuntimeError)      a side effect outside its owning transition
    │   ├── SideEffectBeforeValidation      ... before VALIDATED
    │   ├── TripwireViolation               ... caught by a tripwire (any code, not only ours)
    │   └── DistributedError                ... already done outside: a second initialization
    ├── ConfigMutated (RuntimeError)        the validated config changed after VALIDATED
    ├── PhaseFailed (RuntimeError)          a state's entry work raised; the lifecycle is FAILED
    ├── ProviderError (TypeError)           a model provider cannot be loaded, called or used
    ├── RehearsalError (RuntimeError)       a CPU rehearsal nested, or closed on the wrong thread
    ├── RankFailed (RuntimeError)           a spawned rank raised or died (`run_ranks`)
    ├── LogUnreadable (ValueError)          a startup log cannot be read (`lifecycle audit` exits 2)
    ├── ExtraNotInstalled (ImportError)     an optional dependency is missing; names the pip extra
    ├── ResourceLeak (RuntimeError)         a resource a state made is still alive after its release
    └── ImportHung (RuntimeError)           the background import of torch/megatron is stuck in a module

    StartupAborted (SystemExit)             SIGTERM/SIGINT during startup: logged, released, exit 128+N

Every error keeps its context in keyword-only attributes and pickles across processes.
"""

from __future__ import annotations

from collections.abc import Callable

from bindings import BindingConflict, BindingError, FinalizerNotCalled
from lifecycle.redaction import redact_text
from states import GuardRejected, InvalidTransition, LifecycleError, SideEffect, State, Trigger


class _Redacted(LifecycleError):
    """The errors defined here: their message is redacted (`lifecycle.redaction`) when made, so no
    credential in a value or a cause reaches the caller, a traceback or a pickle."""

    def __init__(self, message: str, **context: object) -> None:
        super().__init__(redact_text(message), **context)


class ConfigError(_Redacted, ValueError):
    """A config value or file is wrong. `problems` lists every one found."""

    problems: list[object]
    field: str | None
    fields: list[str]


class SideEffectError(_Redacted, RuntimeError):
    """A side effect was attempted outside the transition that owns it."""

    kind: SideEffect
    owner: Trigger
    state: State
    trigger: Trigger | None


class SideEffectBeforeValidation(SideEffectError):
    """A side effect was attempted before the config was validated."""


class TripwireViolation(SideEffectError):
    """A tripwire caught a call made outside its owning transition."""

    target: str


class DistributedError(SideEffectError):
    """The process group or megatron's parallel state already exists, created outside this
    lifecycle: a second initialization is refused."""

    field: str
    worlds: list[str]


class ConfigMutated(_Redacted, RuntimeError):
    """The validated config (or the megatron config built from it) changed after VALIDATED."""

    field: str
    fields: list[str]
    validated: str
    current: str


class PhaseFailed(_Redacted, RuntimeError):
    """A state's entry work raised; the lifecycle entered FAILED. The cause is chained."""

    state: State
    trigger: Trigger


class ProviderError(_Redacted, TypeError):
    """A model provider cannot be loaded or called, or returned what megatron cannot wrap:
    `provider`, `chunk` and `returned` say which and what; the message says the fix."""

    provider: str
    chunk: int | None
    returned: str | None


class RehearsalError(_Redacted, RuntimeError):
    """A CPU rehearsal was started twice, or closed from the wrong thread or out of order."""

    thread_id: int


class RankFailed(_Redacted, RuntimeError):
    """A spawned rank raised or died; `rank` and the remote traceback are attached."""

    rank: int
    errors: dict[int, str]
    output: dict[int, str]


class LogUnreadable(_Redacted, ValueError):
    """A startup log line cannot be read: `source`, `line` and `reason` say where and why."""

    source: str
    line: int | None
    reason: str


class ExtraNotInstalled(_Redacted, ImportError):
    """An optional dependency is missing; the message names the `pip install` extra that adds it."""

    extra: str
    field: str


class ResourceLeak(LifecycleError, RuntimeError):
    """A resource in the ledger is still alive after the release of the state that made it:
    `resource` and `state` name it (docs/restart.md#the-ledger)."""

    resource: str
    state: str


class ImportHung(_Redacted, RuntimeError):
    """The import thread (torch, megatron) was still importing `module` after `timeout_s`."""

    module: str
    timeout_s: float


class StartupAborted(SystemExit):
    """SIGTERM or SIGINT arrived during startup: the lifecycle logged `startup_aborted`, released
    everything in reverse order, and the process exits with `code` = 128 + the signal number.
    A SystemExit, not a LifecycleError, so `except Exception` in entry work cannot swallow it."""

    def __init__(self, signum: int, *, state: str, trigger: str | None) -> None:
        import signal

        super().__init__(128 + signum)
        self.signum = signum
        self.signal = signal.Signals(signum).name
        self.state = state
        self.trigger = trigger

    def __reduce__(self) -> tuple[Callable[..., StartupAborted], tuple[int, str, str | None]]:
        return (_aborted, (self.signum, self.state, self.trigger))

    def __str__(self) -> str:
        during = f" during {self.trigger}()" if self.trigger else ""
        return f"startup aborted by {self.signal} in state {self.state}{during}; everything was released"


def _aborted(signum: int, state: str, trigger: str | None) -> StartupAborted:
    return StartupAborted(signum, state=state, trigger=trigger)


__all__ = [
    "BindingConflict",
    "BindingError",
    "ConfigError",
    "ConfigMutated",
    "DistributedError",
    "ExtraNotInstalled",
    "FinalizerNotCalled",
    "GuardRejected",
    "ImportHung",
    "InvalidTransition",
    "LifecycleError",
    "LogUnreadable",
    "PhaseFailed",
    "ProviderError",
    "RankFailed",
    "RehearsalError",
    "ResourceLeak",
    "SideEffectBeforeValidation",
    "SideEffectError",
    "StartupAborted",
    "TripwireViolation",
]
