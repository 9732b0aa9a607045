"""The registry of record types (`SCHEMA`) and the field names each event may carry: what the
writer's strict mode checks. Public through `lifecycle.log.schema`, which documents the schema."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

import msgspec

from lifecycle.log import events
from lifecycle.log._schema_base import ENVELOPE, Field, Record, described
from lifecycle.log._schema_faults import (
    CycleEnded,
    CycleStarted,
    LogWriteFailed,
    PeerFailed,
    RankSimulated,
    ResourceLeaked,
    ResourceLingered,
    RestartsExhausted,
    SignalReceived,
    SimulationStarted,
    StartupAborted,
    StateTimeout,
    WarningRecorded,
)
from lifecycle.log._schema_groups import GroupCreated, TimeoutsRead
from lifecycle.log._schema_startup import (
    CallbacksBound,
    CallbacksUnbound,
    ConfigMutated,
    ConfigNormalized,
    ConfigValidated,
    DistributedInitialized,
    GuardRejected,
    Imports,
    InvalidTransition,
    LifecycleStarted,
    ModelBuilt,
    RehearsalDisabled,
    RehearsalEnabled,
    ServicesReady,
    SettingsChecked,
    SideEffect,
    SideEffectRefused,
    TransitionCompleted,
    TransitionFailed,
    TransitionStarted,
    TripwireViolation,
)
from lifecycle.log._schema_training import (
    CallbackReplaced,
    CheckpointLoaded,
    CheckpointSaved,
    FirstStepFinalized,
    FirstStepNotFinalized,
    GenerationStarted,
    LifecycleShutdown,
    ParamGatherDeferred,
    ParamGatherResumed,
    ParamsSynced,
    ResourcesHandedOver,
    StepCompleted,
    StreamsChecked,
    StreamsRestored,
)

_ORDER: tuple[type[Record], ...] = (  # the order of docs/log-format.md's table: roughly a startup's
    LifecycleStarted,
    TransitionStarted,
    TransitionCompleted,
    TransitionFailed,
    GuardRejected,
    InvalidTransition,
    ConfigValidated,
    Imports,
    ConfigMutated,
    ConfigNormalized,
    SideEffect,
    SideEffectRefused,
    TripwireViolation,
    ServicesReady,
    RehearsalEnabled,
    RehearsalDisabled,
    DistributedInitialized,
    TimeoutsRead,
    GroupCreated,
    ModelBuilt,
    SettingsChecked,
    CallbacksBound,
    CallbacksUnbound,
    FirstStepFinalized,
    FirstStepNotFinalized,
    StepCompleted,
    ParamGatherDeferred,
    ParamGatherResumed,
    ParamsSynced,
    CheckpointLoaded,
    StreamsRestored,
    StreamsChecked,
    CheckpointSaved,
    GenerationStarted,
    LifecycleShutdown,
    StartupAborted,
    SignalReceived,
    StateTimeout,
    PeerFailed,
    LogWriteFailed,
    WarningRecorded,
    SimulationStarted,
    RankSimulated,
    CycleStarted,
    CycleEnded,
    ResourceLeaked,
    ResourceLingered,
    RestartsExhausted,
    ResourcesHandedOver,
    CallbackReplaced,
)


def _tag(cls: type[Record]) -> str:
    return str(cls.__struct_config__.tag)


SCHEMA: Final[Mapping[str, type[msgspec.Struct]]] = MappingProxyType({_tag(cls): cls for cls in _ORDER})
"""Event name → the struct of its records. Its keys are `events.ALL`."""

_FIELDS: Final = {event: frozenset(f.name for f in described(cls)) for event, cls in SCHEMA.items()}
_NAMES: Final = {event: fields | frozenset(ENVELOPE) for event, fields in _FIELDS.items()}
_DESCRIBED: Final = {event: described(cls) for event, cls in SCHEMA.items()}
assert SCHEMA.keys() == events.ALL, sorted(SCHEMA.keys() ^ events.ALL)


def fields_of(event: str) -> frozenset[str]:
    """The fields `event`'s records carry besides the envelope (KeyError for an unknown event)."""
    return _FIELDS[event]


def fields_described(event: str) -> tuple[Field, ...]:
    """`event`'s fields (besides the envelope) in their order, each with its type and meaning."""
    return _DESCRIBED[event]


def record_fields(event: str) -> frozenset[str]:
    """Every name a record of `event` may have: the envelope's and `fields_of(event)`."""
    return _NAMES[event]
