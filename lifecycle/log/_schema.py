"""The registry of record types (`SCHEMA`) and the field names each event may carry: what the
writer's strict mode checks. Public through `lifecycle.log.schema`, which documents the schema."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType, UnionType
from typing import Annotated, Final, Union, get_args, get_origin, get_type_hints

import msgspec
from msgspec import UnsetType

from lifecycle.log import events
from lifecycle.log._schema_base import ENVELOPE, Field, Record, described, type_text
from lifecycle.log._schema_faults import (
    CycleEnded,
    CycleStarted,
    LaunchEnded,
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
    ProcessGroupAdopted,
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
    ProcessGroupAdopted,
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
    LaunchEnded,
)


def _tag(cls: type[Record]) -> str:
    return str(cls.__struct_config__.tag)


SCHEMA: Final[Mapping[str, type[Record]]] = MappingProxyType({_tag(cls): cls for cls in _ORDER})
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


def read_type(event: str, name: str) -> object:
    """The type a reader gets field `name` of `event`'s records as (the envelope's included): its
    type in the schema, or None where the record lacks it (a field only sometimes present, or an
    older log's). KeyError for a name the event's type does not declare."""
    hint = get_type_hints(SCHEMA[event], include_extras=True)[name]
    if get_origin(hint) is Annotated:
        hint = get_args(hint)[0]
    args = get_args(hint) if get_origin(hint) in (Union, UnionType) else (hint,)
    kept = tuple(arg for arg in args if arg is not UnsetType)
    return Union[(*kept, type(None))]


def read_fields(event: str, names: Iterable[str]) -> list[tuple[str, object, None]]:
    """Fields `names` of `event` as a reader's struct declares them (`msgspec.defstruct`): each of its
    `read_type`, None when absent, in sorted order (as the writer sorts keys)."""
    return [(name, read_type(event, name), None) for name in sorted(names)]


def not_of_type(event: str, rec: Mapping[str, object], error: msgspec.ValidationError) -> str:
    """Why record `rec` of `event` is not of its type (`error`, msgspec's), in words:
    `<event>: field 'x' is <value>, expected <type>`, the type as the schema says it."""
    text = str(error)  # msgspec says where: "Expected `int | null`, got `str` - at `$.chunks[0]`"
    name = text.rpartition("`$.")[2].split("`")[0].split("[")[0].split(".")[0]
    hint = get_type_hints(SCHEMA.get(event, Record), include_extras=True).get(name) if "`$." in text else None
    if hint is None or name not in rec:
        return f"{event}: {text[:200]}"
    return f"{event}: field {name!r} is {repr(rec[name])[:60]}, expected {type_text(hint)}"
