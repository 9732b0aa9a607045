"""Library loggers during a run: `transitions` logs every state change at INFO, and once
`megatron.training` is imported the root logger prints INFO to the console (20-24 lines of
`INFO:transitions.core:` per run). The run's own record of those changes is the startup log."""

from __future__ import annotations

import logging

LIBRARIES = ("transitions", "megatron")


def quiet_library_loggers() -> None:
    """Library loggers pass WARNING and above only (INFO never reaches the console)."""
    for name in LIBRARIES:
        logger = logging.getLogger(name)
        if logger.getEffectiveLevel() < logging.WARNING:
            logger.setLevel(logging.WARNING)
