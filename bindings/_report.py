"""BindingReport: what `bind_callbacks` installed, where, and what it verified."""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypedDict

from bindings._protocol import SchedulerConfig
from bindings._watchdog import FirstStepWatchdog


def object_id(obj: object | None) -> str | None:
    """The log's identity format: `"0x..."` of `id()`, or None."""
    return None if obj is None else hex(id(obj))


class BoundFields(TypedDict):
    """The fields of the `callbacks_bound` record that `BindingReport.log_fields` gives."""

    target_type: str
    target_id: str
    scheduler_config_id: str
    provider_config_id: str | None
    copied: bool
    slots: list[str]
    chunks: int
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    policy: str | None


@dataclass(frozen=True, slots=True, kw_only=True, weakref_slot=True)
class BindingReport:
    """The result of one binding. Holds no strong reference to the model, optimizer or config."""

    target_type: str
    target_id: str
    scheduler_config_id: str
    provider_config_id: str | None
    copied: bool
    slots: tuple[str, ...]
    kept: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()
    chunks: int
    optimizer: bool
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    align_grad_reduce: bool
    align_param_gather: bool
    policy: str | None = None
    watchdog: FirstStepWatchdog | None = field(default=None, compare=False, repr=False)
    target_ref: weakref.ReferenceType[SchedulerConfig] | None = field(default=None, compare=False, repr=False)
    installed_ids: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}), compare=False, repr=False)

    def log_fields(self) -> BoundFields:
        """The fields of the `callbacks_bound` record (docs/log-format.md)."""
        return {
            "target_type": self.target_type,
            "target_id": self.target_id,
            "scheduler_config_id": self.scheduler_config_id,
            "provider_config_id": self.provider_config_id,
            "copied": self.copied,
            "slots": list(self.slots),
            "chunks": self.chunks,
            "overlap_grad_reduce": self.overlap_grad_reduce,
            "overlap_param_gather": self.overlap_param_gather,
            "policy": self.policy,
        }

    def target(self) -> SchedulerConfig | None:
        """The bound config while it is alive, else None."""
        return None if self.target_ref is None else self.target_ref()
