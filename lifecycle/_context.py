"""The concrete PhaseContext the engine hands to each phase."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from states import Plan, SideEffect, Trigger

if TYPE_CHECKING:
    from lifecycle.driver import Lifecycle
    from lifecycle.phases import Runtime


@dataclass(frozen=True, slots=True)
class Context:
    """One transition's view of the lifecycle; `runtime` is the record as the transition began."""

    lifecycle: Lifecycle
    runtime: Runtime
    trigger: Trigger

    @property
    def provider(self) -> Any:
        return self.lifecycle.provider

    @property
    def plan(self) -> Plan:
        return self.lifecycle.plan

    @property
    def options(self) -> Mapping[str, Any]:
        return self.lifecycle.options

    def side_effect(self, kind: SideEffect) -> None:
        self.lifecycle._declare_side_effect(kind, self.runtime)

    def emit(self, event: str, **fields: Any) -> None:
        self.lifecycle._emit_from_phase(event, fields)

    def set_rank(self, *, rank: int, world_size: int) -> None:
        self.lifecycle._set_rank(rank=rank, world_size=world_size)
