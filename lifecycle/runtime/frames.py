"""Exceptions that would keep what a state made alive: an error's traceback holds the frames it went
through, and each frame its local variables (a model, an optimizer, the process groups), until the
error itself is gone. The ledger checks each release, and a user's `except` keeps the error, so
every path that ends with what a state made being released lets go of those locals first."""

from __future__ import annotations

import traceback


def drop_frame_locals(*errors: BaseException | None, tracebacks: bool = False) -> None:
    """Clear the local variables of the finished frames in these errors' tracebacks and in those
    of every error chained to them (`__cause__`, `__context__`). The tracebacks still print.

    `tracebacks=True` also drops each traceback: a frame suspended where an asynchronous exception
    landed (a context manager's generator) cannot be cleared, only let go."""
    seen: set[int] = set()
    pending = list(errors)
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        if tracebacks:
            current.__traceback__ = None
        pending += [current.__cause__, current.__context__]
