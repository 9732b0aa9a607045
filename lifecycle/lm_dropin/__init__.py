"""Megatron-LM's own training, started by the lifecycle: change one import and keep your script.

    from lifecycle.lm_dropin import pretrain   # was: from megatron.training import pretrain

`pretrain` takes Megatron-LM's arguments and drives the startup as the lifecycle's states, each
doing its work with Megatron-LM's own function for it (`entry/`), then runs Megatron-LM's `train()`
as is; `teardown()` ends what it leaves up, for a second `pretrain` in the same process. It
needs `megatron.training`, which the megatron-core wheel ships from 0.17 on; importing
this package on an older megatron-core raises `ExtraNotInstalled` naming the version. Importing it
loads neither torch nor megatron.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import takewhile
from typing import TYPE_CHECKING

from lifecycle.errors import ExtraNotInstalled

if TYPE_CHECKING:
    from lifecycle.lm_dropin.entry import TrainResult

MINIMUM = (0, 17)
INSTALL = "pip install 'megatron-lifecycle[megatron-lm]' (megatron-core>=0.17)"


def installed_version() -> str | None:
    """megatron-core's installed version, read from its metadata (nothing is imported)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("megatron-core")
    except PackageNotFoundError:
        return None


def _release(text: str) -> tuple[int, ...]:
    """(major, minor) of a version: each part's leading digits ("0.16rc1" is 0.16, not 0.161)."""
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(takewhile(str.isdigit, piece)) or "0"
        parts.append(int(digits))
    return tuple(parts)


def require_megatron_training() -> None:
    """Raise ExtraNotInstalled unless megatron-core ships `megatron.training` (0.17 or later)."""
    found = installed_version()
    if found is None or _release(found) < MINIMUM:
        raise ExtraNotInstalled(
            f"lifecycle.lm_dropin needs megatron-core>=0.17, whose wheel ships megatron.training; "
            f"installed: {found or 'none'}. {INSTALL}, or use lifecycle.Lifecycle with your provider",
            extra="megatron-lm",
            field="megatron-core",
        )


require_megatron_training()


def __getattr__(name: str) -> Callable[..., TrainResult] | Callable[[], list[str]]:
    if name == "pretrain":
        from lifecycle.lm_dropin.driver import pretrain

        return pretrain
    if name == "teardown":
        from lifecycle.lm_dropin.entry import teardown

        return teardown
    raise AttributeError(name)


__all__ = [
    "pretrain",
    "teardown",
]
