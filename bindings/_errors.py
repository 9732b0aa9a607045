"""The errors of `bindings`: leaves of the tree rooted at `states.LifecycleError`.

LifecycleError
├── BindingError (RuntimeError)         callbacks could not be bound or verified
│   └── BindingConflict                 a slot already holds a different callable
├── FinalizerNotCalled (RuntimeError)   the first training step did not finalize gradients
└── SettingsNotLanded (ValueError)      a setting asked for is not what the model carries
"""

from __future__ import annotations

from states import LifecycleError


class BindingError(LifecycleError, RuntimeError):
    """Callbacks could not be bound to, or verified on, the scheduler's config."""

    slot: str
    slots: list[str]
    chunk: int
    chunk_type: str
    chunks: int | None
    got: str
    policy: object
    state: str
    verdict: str
    elsewhere: list[str]
    config_id: str
    scheduler_config_id: str
    target_id: str


class BindingConflict(BindingError):
    """A callback slot already holds a different callable and no policy was chosen."""

    existing: str
    new: str


class FinalizerNotCalled(LifecycleError, RuntimeError):
    """The first training step ran without calling finalize_model_grads exactly once."""

    finalizer_calls: int
    step: int
    config_id: str


class SettingsNotLanded(LifecycleError, ValueError):
    """A setting asked for is not what the model that trains carries (`bindings.check_settings`):
    `fields` names each one, `mismatches` says what was requested and found, and where."""

    fields: list[str]
    mismatches: list[dict[str, str]]
