"""The entry-work protocol: what each state's phase receives and returns.

A `PhaseSet` supplies one callable per forward trigger plus `release`. The engine calls them inside
the owning transition; each returns the next `Runtime` (derived with `dataclasses.replace`). The
real Megatron phases and the light in-process ones plug in the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from states import Plan, SideEffect, State, Trigger

if TYPE_CHECKING:
    from lifecycle.config import RunConfig


@dataclass(frozen=True, slots=True, kw_only=True)
class Runtime:
    """What exists now. Fields stay None until the phase that owns them has run."""

    config: RunConfig
    generation: int = 0
    fingerprint: str | None = None
    services_ready: bool = False
    tokenizer: Any = None
    vocab_size: int | None = None
    vocab_source: str | None = None
    writers: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    distributed: bool = False
    rank: int = 0
    world_size: int = 1
    backend: str | None = None
    pg_collection: Any = None
    transformer_config: Any = None
    provider_config: Any = None
    model: tuple[Any, ...] | None = None
    optimizer: Any = None
    ddp_config: Any = None
    binding: Any = None
    rehearsal: Any = None
    extras: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def validated(self) -> bool:
        return self.fingerprint is not None


class PhaseContext(Protocol):
    """What a phase may use. Side effects are declared (or caught by tripwires) here."""

    @property
    def runtime(self) -> Runtime: ...
    @property
    def provider(self) -> Any: ...
    @property
    def plan(self) -> Plan: ...
    @property
    def trigger(self) -> Trigger: ...
    @property
    def options(self) -> Mapping[str, Any]: ...

    def side_effect(self, kind: SideEffect) -> None:
        """Declare a side effect; raises unless the active transition owns it and VALIDATED passed."""

    def emit(self, event: str, **fields: Any) -> None:
        """Write a startup-log record (event names from lifecycle/events.py)."""

    def set_rank(self, *, rank: int, world_size: int) -> None:
        """Tell the log this process's rank once the process group knows it."""


class PhaseSet(Protocol):
    """Entry work for each forward trigger, and `release` for rebuild, restart and shutdown."""

    def validate(self, ctx: PhaseContext) -> Runtime: ...
    def start_services(self, ctx: PhaseContext) -> Runtime: ...
    def init_distributed(self, ctx: PhaseContext) -> Runtime: ...
    def build_model(self, ctx: PhaseContext) -> Runtime: ...
    def bind_callbacks(self, ctx: PhaseContext) -> Runtime: ...

    def release(self, ctx: PhaseContext, keep: State) -> Runtime:
        """Undo, in reverse order, everything built after `keep` (DISTRIBUTED for rebuild,
        VALIDATED for restart, CONFIGURED for shutdown). Must tolerate partial state (after a failure)."""
