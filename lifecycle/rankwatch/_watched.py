"""What the main thread does under a rank watch (_watch.py), and the phases' ways into the job's watch."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import dataclass

from lifecycle.log.records import Record
from lifecycle.runtime import PhaseContext, Watch

Emit = Callable[[Record], None]


@dataclass(frozen=True, slots=True)
class ActiveWork:
    """What the main thread is doing under the watch: the state, how to log, since when, and whether the watcher
    enforces `timeout_s` on it (collective states; a training step relies on its collectives' own timeout).
    `RankWatch.watching` makes one; the watcher only reads it."""

    emit: Emit
    trigger: str
    state: str
    started: float
    deadline: bool


def watched(ctx: PhaseContext, state: str) -> AbstractContextManager[None]:
    """`RankWatch.phase` when DISTRIBUTED started a watch for this job (`Runtime.rank_watch`), else nothing."""
    watch = ctx.runtime.rank_watch
    return watch.phase(ctx, state) if watch is not None else nullcontext()


def watched_step(watch: Watch | None, emit: Emit, step: int) -> AbstractContextManager[None]:
    """A training step (after startup) under the failure broadcast of `watch` (`Runtime.rank_watch`),
    without the state deadline: its collectives time out after `startup.timeout_s` by themselves."""
    if watch is None:
        return nullcontext()
    return watch.watching(emit, f"step {step}", "CALLBACKS_BOUND", deadline=False)


def mark_failed(watch: Watch | None, state: str, reason: str) -> None:
    """Tell this job's watch (`Runtime.rank_watch`, if any) that the lifecycle failed: see `RankWatch.mark_failed`."""
    if watch is not None:
        with suppress(Exception):
            watch.mark_failed(state, reason)
