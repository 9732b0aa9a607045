"""The record types: one `msgspec.Struct` per event, what every writer constructs and hands to the log.

A writer builds an event's record with the event's own fields and writes it:
`lc.record(StepCompleted(step=step, loss=loss, duration_s=took))` (training code), `ctx.emit(ModelBuilt(...))`
(a phase), `AuditLog.write(record)`. The writer adds the envelope (`ts`, `seq`, `run_id`, `rank`, ...:
`Record`), so a record never names it. A wrong field name is a TypeError where the record is built,
and mypy checks each field's name and type. Every field's type and meaning: `lifecycle.log.schema`
and docs/log-format.md. Imports neither torch nor megatron (nor builds the schema's tables).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from msgspec import UNSET as UNSET
from msgspec import UnsetType as UnsetType

from lifecycle.log import events
from lifecycle.log._redact import redact
from lifecycle.log._schema_base import Record as Record
from lifecycle.log._schema_faults import CycleEnded as CycleEnded
from lifecycle.log._schema_faults import CycleStarted as CycleStarted
from lifecycle.log._schema_faults import LaunchEnded as LaunchEnded
from lifecycle.log._schema_faults import LogWriteFailed as LogWriteFailed
from lifecycle.log._schema_faults import PeerFailed as PeerFailed
from lifecycle.log._schema_faults import RankSimulated as RankSimulated
from lifecycle.log._schema_faults import ResourceLeaked as ResourceLeaked
from lifecycle.log._schema_faults import ResourceLingered as ResourceLingered
from lifecycle.log._schema_faults import RestartsExhausted as RestartsExhausted
from lifecycle.log._schema_faults import SignalReceived as SignalReceived
from lifecycle.log._schema_faults import SimulationStarted as SimulationStarted
from lifecycle.log._schema_faults import StartupAborted as StartupAborted
from lifecycle.log._schema_faults import StateTimeout as StateTimeout
from lifecycle.log._schema_faults import WarningRecorded as WarningRecorded
from lifecycle.log._schema_groups import GroupCreated as GroupCreated
from lifecycle.log._schema_groups import TimeoutsRead as TimeoutsRead
from lifecycle.log._schema_startup import CallbacksBound as CallbacksBound
from lifecycle.log._schema_startup import CallbacksUnbound as CallbacksUnbound
from lifecycle.log._schema_startup import ConfigMutated as ConfigMutated
from lifecycle.log._schema_startup import ConfigNormalized as ConfigNormalized
from lifecycle.log._schema_startup import ConfigValidated as ConfigValidated
from lifecycle.log._schema_startup import DistributedInitialized as DistributedInitialized
from lifecycle.log._schema_startup import GuardRejected as GuardRejected
from lifecycle.log._schema_startup import Imports as Imports
from lifecycle.log._schema_startup import InvalidTransition as InvalidTransition
from lifecycle.log._schema_startup import LifecycleStarted as LifecycleStarted
from lifecycle.log._schema_startup import ModelBuilt as ModelBuilt
from lifecycle.log._schema_startup import ProcessGroupAdopted as ProcessGroupAdopted
from lifecycle.log._schema_startup import RehearsalDisabled as RehearsalDisabled
from lifecycle.log._schema_startup import RehearsalEnabled as RehearsalEnabled
from lifecycle.log._schema_startup import ServicesReady as ServicesReady
from lifecycle.log._schema_startup import SettingsChecked as SettingsChecked
from lifecycle.log._schema_startup import SideEffect as SideEffect
from lifecycle.log._schema_startup import SideEffectRefused as SideEffectRefused
from lifecycle.log._schema_startup import TransitionCompleted as TransitionCompleted
from lifecycle.log._schema_startup import TransitionFailed as TransitionFailed
from lifecycle.log._schema_startup import TransitionStarted as TransitionStarted
from lifecycle.log._schema_startup import TripwireViolation as TripwireViolation
from lifecycle.log._schema_training import CallbackReplaced as CallbackReplaced
from lifecycle.log._schema_training import CheckpointLoaded as CheckpointLoaded
from lifecycle.log._schema_training import CheckpointSaved as CheckpointSaved
from lifecycle.log._schema_training import FirstStepFinalized as FirstStepFinalized
from lifecycle.log._schema_training import FirstStepNotFinalized as FirstStepNotFinalized
from lifecycle.log._schema_training import GenerationStarted as GenerationStarted
from lifecycle.log._schema_training import LifecycleShutdown as LifecycleShutdown
from lifecycle.log._schema_training import ParamGatherDeferred as ParamGatherDeferred
from lifecycle.log._schema_training import ParamGatherResumed as ParamGatherResumed
from lifecycle.log._schema_training import ParamsSynced as ParamsSynced
from lifecycle.log._schema_training import ResourcesHandedOver as ResourcesHandedOver
from lifecycle.log._schema_training import StepCompleted as StepCompleted
from lifecycle.log._schema_training import StreamsChecked as StreamsChecked
from lifecycle.log._schema_training import StreamsRestored as StreamsRestored
from lifecycle.log._values import JSONValue


def redacted(config: Mapping[str, JSONValue]) -> dict[str, object]:
    """`config` (a `RunConfig.to_dict()`) redacted for `ConfigValidated.config`: `redact` keeps a dict a dict."""
    out = redact(config)
    assert isinstance(out, dict)
    return out


def first_step(write: Callable[[Record], None]) -> Callable[..., None]:
    """`bindings`' first-step watchdog's `emit`, which names its event (bindings is below the log and
    cannot import these types), as a writer of the typed record."""

    def emit(event: str, *, finalizer_calls: int, step: int | UnsetType = UNSET) -> None:
        kinds = {
            events.FIRST_STEP_FINALIZED: FirstStepFinalized,
            events.FIRST_STEP_NOT_FINALIZED: FirstStepNotFinalized,
        }
        write(kinds[event](finalizer_calls=finalizer_calls, step=step))

    return emit


__all__ = sorted(  # the record types (one per event) and what writers build them with; counted as `records`
    [name for name, value in dict(globals()).items() if isinstance(value, type) and issubclass(value, Record)]
    + ["UNSET", "UnsetType", "first_step", "redacted"]
)
