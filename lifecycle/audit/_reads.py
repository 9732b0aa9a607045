"""The audit's reader's structs: per event, the fields its handler reads, each as the log's schema types
it (`lifecycle.log.schema.read_type`: its type, or None where the record lacks it; a test holds each
to the schema). A parsed record is converted to its event's struct (`_typed.as_read`), and the batch
path decodes the same fields, with the envelope (`_feed.RECORD_TYPES`); a handler reads attributes,
typed, never a field by name. A field a handler reads is declared here, once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias

import msgspec

from lifecycle.log import JSONValue, events

if TYPE_CHECKING:
    Found: TypeAlias = JSONValue
else:
    Found = Any  # msgspec keeps each value as the record holds it: the reader checks its type


class Envelope(msgspec.Struct, gc=False, kw_only=True):
    """A parsed record's envelope as it stands, each field any JSON value (None where the record lacks
    it): what the record-by-record reader checks (`RankAudit.feed`, `_feed._Router`) before it reads
    the record's other fields (`READ_TYPES`)."""

    event: Found = None
    generation: Found = None
    hash: Found = None
    prev_hash: Found = None
    rank: Found = None
    run_id: Found = None
    seq: Found = None
    ts: Found = None
    world_size: Found = None


def envelope(rec: Mapping[str, JSONValue]) -> Envelope:
    """The envelope of parsed record `rec`, its values unchanged (C: no field is checked here)."""
    return msgspec.convert(rec, Envelope)


class Typed(msgspec.Struct, gc=False, kw_only=True):
    """The base of the records the handlers read (`READ_TYPES`, and the batch path's)."""

    event: ClassVar[str]


class LifecycleStarted(Typed, kw_only=True):  # `lifecycle_started`, as `_handlers.started` reads it
    event: ClassVar[str] = events.LIFECYCLE_STARTED
    attempt: int | None = None
    host: str | None = None
    launcher: str | None = None
    plan: str | None = None
    target: str | None = None


class TransitionStarted(Typed, kw_only=True):  # `transition_started`, as `_handlers.transition_started` reads it
    event: ClassVar[str] = events.TRANSITION_STARTED
    trigger: str | None = None


class TransitionCompleted(Typed, kw_only=True):  # `transition_completed`, as `_handlers.transition_completed` reads it
    event: ClassVar[str] = events.TRANSITION_COMPLETED
    config_fingerprint: str | None = None
    dest: str | None = None
    reason: str | None = None
    trigger: str | None = None


class TransitionFailed(Typed, kw_only=True):  # `transition_failed`, as `_handlers.transition_failed` reads it
    event: ClassVar[str] = events.TRANSITION_FAILED
    error: str | None = None
    error_type: str | None = None
    field: str | None = None
    trigger: str | None = None


class StartupAborted(Typed, kw_only=True):  # `startup_aborted`, as `_failures.startup_aborted` reads it
    event: ClassVar[str] = events.STARTUP_ABORTED
    signal: str | None = None
    state: str | None = None


class PeerFailed(Typed, kw_only=True):  # `peer_failed`, as `_failures.peer_failed` reads it
    event: ClassVar[str] = events.PEER_FAILED
    error: str | None = None
    peer_kind: str | None = None
    peer_rank: int | None = None
    peer_state: str | None = None
    trigger: str | None = None


class StateTimeout(Typed, kw_only=True):  # `state_timeout`, as `_failures.state_timeout` reads it
    event: ClassVar[str] = events.STATE_TIMEOUT
    missing: list[int] | None = None
    state: str | None = None
    timeout_s: float | None = None
    trigger: str | None = None


class ConfigValidated(Typed, kw_only=True):  # `config_validated`, as `_handlers.config_validated` reads it
    event: ClassVar[str] = events.CONFIG_VALIDATED
    fingerprint: str | None = None


class ConfigMutated(Typed, kw_only=True):  # `config_mutated`, as `_handlers.config_mutated` reads it
    event: ClassVar[str] = events.CONFIG_MUTATED
    current: object | None = None
    field: str | None = None
    validated: object | None = None


class SideEffect(Typed, kw_only=True):  # `side_effect`, as `_ordering.side_effect` reads it
    event: ClassVar[str] = events.SIDE_EFFECT
    kind: str | None = None
    trigger: str | None = None


class TripwireViolation(Typed, kw_only=True):  # `tripwire_violation`, as `_handlers.tripwire` reads it
    event: ClassVar[str] = events.TRIPWIRE_VIOLATION
    kind: str | None = None
    owner: str | None = None
    policy: str | None = None
    state: str | None = None
    target: str | None = None
    trigger: str | None = None


class ModelBuilt(Typed, kw_only=True):  # `model_built`, as `_handlers.model_built` reads it
    event: ClassVar[str] = events.MODEL_BUILT
    model_config_id: str | None = None


class SettingsChecked(Typed, kw_only=True):  # `settings_checked`, as `_settings.settings_checked` reads it
    event: ClassVar[str] = events.SETTINGS_CHECKED
    mismatches: list[dict[str, str]] | None = None


class StreamsChecked(Typed, kw_only=True):  # `streams_checked`, as `_resume.streams_checked` reads it
    event: ClassVar[str] = events.STREAMS_CHECKED
    moved: list[dict[str, str]] | None = None
    optimizer: dict[str, object] | None = None
    position: dict[str, int] | None = None
    restored_position: dict[str, int] | None = None
    restored_step: int | None = None
    saved_optimizer: dict[str, object] | None = None
    step: int | None = None


class TimeoutsRead(Typed, kw_only=True):  # `timeouts_read`, as `_groups.timeouts_read` reads it
    event: ClassVar[str] = events.TIMEOUTS_READ
    configured_s: float | None = None
    groups: list[dict[str, object]] | None = None
    store_s: float | None = None
    watch_s: float | None = None
    world_s: float | None = None


class GroupCreated(Typed, kw_only=True):  # `group_created`, as `_groups.group_created` reads it
    event: ClassVar[str] = events.GROUP_CREATED
    created_by: str | None = None
    member: bool | None = None
    name: str | None = None
    timeout_s: float | None = None


class ProcessGroupAdopted(Typed, kw_only=True):  # `process_group_adopted`, as `_groups.group_adopted` reads it
    event: ClassVar[str] = events.PROCESS_GROUP_ADOPTED
    timeout_s: float | None = None


class CallbacksBound(Typed, kw_only=True):  # `callbacks_bound`, as `_handlers.callbacks_bound` reads it
    event: ClassVar[str] = events.CALLBACKS_BOUND
    scheduler_config_id: str | None = None
    target_id: str | None = None
    target_type: str | None = None


class CallbacksUnbound(Typed, kw_only=True):  # `callbacks_unbound`, as `_handlers.callbacks_unbound` reads it
    event: ClassVar[str] = events.CALLBACKS_UNBOUND


class StepCompleted(Typed, kw_only=True):  # `step_completed`, as `_handlers.step_completed` reads it
    event: ClassVar[str] = events.STEP_COMPLETED


class FirstStepFinalized(Typed, kw_only=True):  # `first_step_finalized`, as `_handlers.first_step_finalized` reads it
    event: ClassVar[str] = events.FIRST_STEP_FINALIZED


class FirstStepNotFinalized(
    Typed, kw_only=True
):  # `first_step_not_finalized`, as `_handlers.first_step_not_finalized` reads it
    event: ClassVar[str] = events.FIRST_STEP_NOT_FINALIZED
    finalizer_calls: int | None = None


class LifecycleShutdown(Typed, kw_only=True):  # `lifecycle_shutdown`, as `_handlers.shutdown` reads it
    event: ClassVar[str] = events.LIFECYCLE_SHUTDOWN
    leaked: list[dict[str, str]] | None = None


class SimulationStarted(Typed, kw_only=True):  # `simulation_started`, as `_handlers.simulation` reads it
    event: ClassVar[str] = events.SIMULATION_STARTED
    simulated: int | None = None


class RankSimulated(Typed, kw_only=True):  # `rank_simulated`, as `_handlers.rank_simulated` reads it
    event: ClassVar[str] = events.RANK_SIMULATED
    counts: dict[str, dict[str, int]] | None = None


class Imports(Typed, kw_only=True):  # `imports`, as `_handlers.imports` reads it
    event: ClassVar[str] = events.IMPORTS
    duration_s: float | None = None
    started_ts: float | None = None
    waited_s: float | None = None


class Warned(Typed, kw_only=True):  # `warning`, as `_handlers.warning` reads it
    event: ClassVar[str] = events.WARNING
    category: str | None = None
    message: str | None = None
    module: str | None = None


class ResourceLeaked(Typed, kw_only=True):  # `resource_leaked`, as `_failures.resource_leaked` reads it
    event: ClassVar[str] = events.RESOURCE_LEAKED
    resource: str | None = None
    state: str | None = None


class CallbackReplaced(Typed, kw_only=True):  # `callback_replaced`, as `_handlers.callback_replaced` reads it
    event: ClassVar[str] = events.CALLBACK_REPLACED
    now: str | None = None
    slot: str | None = None
    was: str | None = None
    writer: str | None = None


class CycleStarted(Typed, kw_only=True):  # `cycle_started`, as `_cycles.cycle_started` reads it
    event: ClassVar[str] = events.CYCLE_STARTED
    cycle: int | None = None
    fingerprint: str | None = None
    hooks: dict[str, int] | None = None
    launched_world_size: int | None = None
    ledger: list[str] | None = None
    restart_s: float | None = None
    restart_timeouts: dict[str, float | None] | None = None
    resumed_step: int | None = None
    world_size: int | None = None


class CycleEnded(Typed, kw_only=True):  # `cycle_ended`, as `_cycles.cycle_ended` reads it
    event: ClassVar[str] = events.CYCLE_ENDED
    cause: str | None = None
    cause_rank: int | None = None
    cycle: int | None = None
    fault_ts: float | None = None


class SignalReceived(Typed, kw_only=True):  # `signal_received`, as `_cycles.signal_received` reads it
    event: ClassVar[str] = events.SIGNAL_RECEIVED
    signal: str | None = None


class RestartsExhausted(Typed, kw_only=True):  # `restarts_exhausted`, as `_failures.restarts_exhausted` reads it
    event: ClassVar[str] = events.RESTARTS_EXHAUSTED
    cause: str | None = None
    cause_rank: int | None = None
    cycles: int | None = None
    reason: str | None = None


READ_TYPES: Mapping[str, type[Typed]] = {cls.event: cls for cls in Typed.__subclasses__()}
"""By event: the struct its records are read as, for its handler (`_handlers.HANDLERS`)."""
READS: Mapping[str, tuple[str, ...]] = {event: cls.__struct_fields__ for event, cls in READ_TYPES.items()}
"""By event: the fields its handler reads besides the envelope (the batch path decodes these)."""
