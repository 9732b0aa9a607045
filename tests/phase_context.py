"""A concrete PhaseContext for testing entry work without the engine: it records what a phase
declares and emits, and refuses side effects outside their owning trigger like the engine does."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lifecycle import Options, RunConfig, Runtime
from lifecycle.log.records import Record
from lifecycle.testing import fields_written
from states import SIDE_EFFECT_OWNERS, Plan, SideEffect, Trigger


@dataclass
class RecordingContext:
    runtime: Runtime
    trigger: Trigger = Trigger.VALIDATE
    plan: Plan = Plan.TRAINING
    provider: Any = None
    options: Options = field(default_factory=Options)
    log_dir: Path | None = None
    side_effects: list[SideEffect] = field(default_factory=list)
    emitted: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    ranks: list[tuple[int, int]] = field(default_factory=list)

    @classmethod
    def for_config(cls, config: RunConfig, **kw: Any) -> RecordingContext:
        return cls(runtime=Runtime(config=config), **kw)

    def side_effect(self, kind: SideEffect) -> None:
        if SIDE_EFFECT_OWNERS[kind] is not self.trigger:
            raise AssertionError(f"{kind} declared during {self.trigger}")
        self.side_effects.append(kind)

    def emit(self, record: Record) -> None:
        self.emitted.append(fields_written(record))

    def set_rank(self, *, rank: int, world_size: int) -> None:
        self.ranks.append((rank, world_size))

    def events(self) -> list[str]:
        return [e for e, _ in self.emitted]

    def advance(self, runtime: Runtime, trigger: Trigger) -> RecordingContext:
        """The context for the next phase, keeping what was recorded."""
        self.runtime, self.trigger = runtime, trigger
        return self
