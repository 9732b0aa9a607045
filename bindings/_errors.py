"""The errors of `bindings`: leaves of the tree rooted at `states.LifecycleError`.

LifecycleError
├── BindingError (RuntimeError)         callbacks could not be bound or verified
│   └── BindingConflict                 a slot already holds a different callable
└── FinalizerNotCalled (RuntimeError)   the first training step did not finalize gradients
"""

from __future__ import annotations

from states import LifecycleError


class BindingError(LifecycleError, RuntimeError):
    """Callbacks could not be bound to, or verified on, the scheduler's config."""


class BindingConflict(BindingError):
    """A callback slot already holds a different callable and no policy was chosen."""


class FinalizerNotCalled(LifecycleError, RuntimeError):
    """The first training step ran without calling finalize_model_grads exactly once."""
