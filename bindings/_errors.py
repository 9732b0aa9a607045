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


class BindingConflict(BindingError):
    """A callback slot already holds a different callable and no policy was chosen."""


class FinalizerNotCalled(LifecycleError, RuntimeError):
    """The first training step ran without calling finalize_model_grads exactly once."""


class SettingsNotLanded(LifecycleError, ValueError):
    """A setting asked for is not what the model that trains carries (`bindings.check_settings`):
    `fields` names each one, `mismatches` says what was requested and found, and where."""
