"""The concrete PhaseContext the engine hands to each phase: the transition's view, and exactly the
three engine calls a phase may make (declare a side effect, emit a record, set the rank)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lifecycle.log.records import Record
from lifecycle.runtime import GivenProvider, Options, Runtime
from states import Plan, SideEffect, Trigger


@dataclass(frozen=True, slots=True, kw_only=True)
class Context:
    """One transition's view of the lifecycle; `runtime` is the record as the transition began."""

    runtime: Runtime
    trigger: Trigger
    provider: GivenProvider
    plan: Plan
    options: Options
    log_dir: Path | None
    """The run's startup-log directory as its one owner (`LogDir`) holds it, or None."""
    declare: Callable[[SideEffect, Runtime], None]
    record: Callable[[Record], None]
    rank_known: Callable[[int, int], None]

    def side_effect(self, kind: SideEffect) -> None:
        self.declare(kind, self.runtime)

    def emit(self, record: Record) -> None:
        self.record(record)

    def set_rank(self, *, rank: int, world_size: int) -> None:
        self.rank_known(rank, world_size)
