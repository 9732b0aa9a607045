"""The records of the startup: the lifecycle, its transitions, the config, the states' own records,
the side effects and the signals (`lifecycle.log.schema` puts them in order)."""

from __future__ import annotations

from typing import Annotated

from msgspec import UNSET, Meta, UnsetType

from lifecycle.log._schema_base import Record

Trigger = Annotated[str, Meta(description="the transition's trigger (a `Trigger` value: `validate`, ...)")]
ActiveTrigger = Annotated[str | None, Meta(description="the transition running then (a `Trigger` value), or null")]
Source = Annotated[str, Meta(description="the state the transition started from (a `State` name)")]
Duration = Annotated[float, Meta(description="seconds it took")]
StateName = Annotated[str, Meta(description="the state the lifecycle was in (a `State` name)")]
Reason = Annotated[str, Meta(description="why, in words")]


class LifecycleStarted(Record, frozen=True, kw_only=True, tag="lifecycle_started"):
    """The first record of every attempt: written when the `Lifecycle` is created."""

    plan: Annotated[str, Meta(description="the startup plan (`Plan` value)")]
    target: Annotated[str, Meta(description="the state the plan starts up to")]
    policy: Annotated[str, Meta(description="the tripwire policy (`raise`, `warn`, `off`)")]
    pid: Annotated[int, Meta(description="the process id")]
    host: Annotated[str, Meta(description="the host name")]
    rehearsal: Annotated[bool | None, Meta(description="the config's `rehearsal` (null: decided by CUDA)")]
    attempt: Annotated[
        int | UnsetType, Meta(description="1, 2, …: only when it continues an earlier attempt's file")
    ] = UNSET
    restart_count: Annotated[int | UnsetType, Meta(description="torchrun's `TORCHELASTIC_RESTART_COUNT`, when set")] = (
        UNSET
    )
    launcher: Annotated[
        str | UnsetType,
        Meta(
            description="`lifecycle run` when that launcher started this rank: the audit then expects its "
            "`launcher-NNNNN.jsonl` record, and a log that only stops proves no death without it"
        ),
    ] = UNSET


class TransitionStarted(Record, frozen=True, kw_only=True, tag="transition_started"):
    """A transition begins (before its entry work)."""

    trigger: Trigger
    source: Source


class TransitionCompleted(Record, frozen=True, kw_only=True, tag="transition_completed"):
    """A transition ended: the lifecycle is now in `dest`."""

    trigger: Trigger
    source: Source
    dest: Annotated[str, Meta(description="the state it reached")]
    duration_s: Duration
    config_fingerprint: Annotated[
        str | None, Meta(description="the validated config's fingerprint (null before VALIDATED)")
    ]
    reason: Annotated[
        str | UnsetType, Meta(description="only for the `fail` trigger: what failed (`trigger: ErrorType`, ...)")
    ] = UNSET


class TransitionFailed(Record, frozen=True, kw_only=True, tag="transition_failed"):
    """A transition's entry work raised (the lifecycle then enters FAILED)."""

    trigger: Trigger
    source: Source
    error_type: Annotated[str, Meta(description="the exception's class name")]
    error: Annotated[str, Meta(description="the exception's text (redacted)")]
    duration_s: Duration
    field: Annotated[
        str | UnsetType, Meta(description="the config field the error names (a `LifecycleError`'s), when it names one")
    ] = UNSET


class GuardRejected(Record, frozen=True, kw_only=True, tag="guard_rejected"):
    """A transition's guard refused it; `GuardRejected` is raised."""

    trigger: Trigger
    source: Source
    guard: Annotated[str, Meta(description="the guard's name")]
    reason: Annotated[str, Meta(description="the rule the guard checks")]


class InvalidTransition(Record, frozen=True, kw_only=True, tag="invalid_transition"):
    """A trigger that is not defined from the current state; `InvalidTransition` is raised."""

    trigger: Trigger
    source: Source
    allowed: Annotated[list[str], Meta(description="the triggers allowed from `source`")]


class ConfigValidated(Record, frozen=True, kw_only=True, tag="config_validated"):
    """VALIDATED checked the config: it is frozen from now on."""

    fingerprint: Annotated[str, Meta(description="the config's fingerprint")]
    config: Annotated[dict[str, object], Meta(description="the config (redacted dict)")]
    environment: Annotated[bool, Meta(description="environment checks ran")]


class Imports(Record, frozen=True, kw_only=True, tag="imports"):
    """The heavy imports that ran beside VALIDATED: written inside VALIDATED, before its
    `transition_completed`."""

    modules: Annotated[
        dict[str, float],
        Meta(
            description='seconds per top-level module, e.g. `{"torch": 2.1, "megatron": 5.4}`; 0 when already imported'
        ),
    ]
    started_ts: Annotated[float, Meta(description="when the import thread started, Unix seconds")]
    duration_s: Annotated[float, Meta(description="the import thread's run")]
    waited_s: Annotated[float, Meta(description="how long VALIDATED waited for it")]
    failed: Annotated[dict[str, str], Meta(description="module → error")]


class ConfigMutated(Record, frozen=True, kw_only=True, tag="config_mutated"):
    """A config field changed after VALIDATED (one record per field); `ConfigMutated` is raised."""

    field: Annotated[str, Meta(description="the config field (dotted path)")]
    validated: Annotated[object, Meta(description="its value when validated")]
    current: Annotated[object, Meta(description="its value now")]


class ConfigNormalized(Record, frozen=True, kw_only=True, tag="config_normalized"):
    """One per rewrite VALIDATED made as Megatron-LM's `arguments.py` does
    ([validation](validation.md#normalization)), before `config_validated`."""

    field: Annotated[str, Meta(description="the config field rewritten (dotted path)")]
    given: Annotated[object, Meta(description="the value given")]
    used: Annotated[object, Meta(description="the value used")]
    why: Annotated[str, Meta(description="why Megatron-LM rewrites it")]


class SideEffect(Record, frozen=True, kw_only=True, tag="side_effect"):
    """A process-global side effect (process group, RNG seeding, ...) done by the transition that owns it."""

    kind: Annotated[str, Meta(description="the side effect (a `SideEffect` value)")]
    trigger: Annotated[str, Meta(description="the owning transition that performed it")]


class SideEffectRefused(Record, frozen=True, kw_only=True, tag="side_effect_refused"):
    """A side effect attempted outside the transition that owns it; it is refused with an error."""

    kind: Annotated[str, Meta(description="the side effect (a `SideEffect` value)")]
    trigger: Annotated[str | None, Meta(description="the active transition, or null")]
    owner: Annotated[str, Meta(description="the transition that owns it")]
    state: StateName
    reason: Reason


class TripwireViolation(Record, frozen=True, kw_only=True, tag="tripwire_violation"):
    """A tripwire caught a call that does a side effect outside its owning transition."""

    target: Annotated[str, Meta(description='the function called, e.g. `"torch.manual_seed"`')]
    kind: Annotated[str, Meta(description="the side effect (a `SideEffect` value)")]
    owner: Annotated[str, Meta(description="the transition that owns it")]
    state: StateName
    trigger: Annotated[str | None, Meta(description="the active transition, or null")]
    policy: Annotated[str, Meta(description="the tripwire policy (`raise`, `warn`)")]


class ServicesReady(Record, frozen=True, kw_only=True, tag="services_ready"):
    """SERVICES_READY built the tokenizer and resolved the vocabulary size."""

    tokenizer: Annotated[str | None, Meta(description="the tokenizer's type name, or null")]
    vocab_size: Annotated[int | None, Meta(description="the (padded) vocabulary size")]
    vocab_source: Annotated[
        str | None,
        Meta(
            description="where it came from (`explicit`/`checkpoint`/`tokenizer`; the Megatron-LM drop-in: "
            "`parse_and_validate_args`/`set_global_variables`)"
        ),
    ]


class ProcessGroupAdopted(Record, frozen=True, kw_only=True, tag="process_group_adopted"):
    """The Megatron-LM drop-in's DISTRIBUTED took the process group the script had made, as
    Megatron-LM's `_initialize_distributed` does; it stays the script's: the lifecycle never destroys
    it ([adopting.md](adopting.md))."""

    backend: Annotated[str, Meta(description="the group's backend")]
    world_size: Annotated[int, Meta(description="the group's size")]
    rank: Annotated[int, Meta(description="this rank in it")]
    timeout_s: Annotated[
        float | None, Meta(description="its timeout, read back from the group: the script's, not `startup.timeout_s`")
    ]


class DistributedInitialized(Record, frozen=True, kw_only=True, tag="distributed_initialized"):
    """DISTRIBUTED made the process group and megatron's parallel state."""

    backend: Annotated[str | None, Meta(description="the process group's backend")]
    tp: Annotated[int, Meta(description="tensor-parallel size")]
    pp: Annotated[int, Meta(description="pipeline-parallel size")]
    cp: Annotated[int, Meta(description="context-parallel size")]
    ep: Annotated[int, Meta(description="expert-parallel size")]
    dp: Annotated[int, Meta(description="data-parallel size")]
    vpp: Annotated[int | None, Meta(description="virtual pipeline stages per pipeline rank")]
    ranks: Annotated[
        dict[str, int] | UnsetType, Meta(description="this rank's `tp`/`pp`/`cp`/`ep`/`dp` coordinates")
    ] = UNSET


class ModelBuilt(Record, frozen=True, kw_only=True, tag="model_built"):
    """MODEL_BUILT built the model chunks (and the optimizer)."""

    chunks: Annotated[int, Meta(description="model chunks built")]
    model_config_id: Annotated[str, Meta(description="the model's `TransformerConfig` (`0x...` identity)")]
    provider_config_id: Annotated[str, Meta(description="the provider's config (`0x...` identity)")]
    optimizer: Annotated[bool, Meta(description="an optimizer was built")]


class SettingsChecked(Record, frozen=True, kw_only=True, tag="settings_checked"):
    """MODEL_BUILT compared every setting asked for with what the model that trains carries
    (`bindings.check_settings`); audit rule LA026 reads it."""

    objects: Annotated[
        list[str], Meta(description="the objects compared (each chunk's config, DDP config, the optimizer's)")
    ]
    compared: Annotated[int, Meta(description="field comparisons made")]
    mismatches: Annotated[
        list[dict[str, str]],
        Meta(description="each setting that did not land: section, field, kind, requested, found, where, asked_as"),
    ]
    allowed: Annotated[
        list[dict[str, str]], Meta(description="mismatches accepted by `settings.allow_mismatch`, in the same shape")
    ]
    duration_s: Annotated[float, Meta(description="seconds the comparison took")]


class CallbacksBound(Record, frozen=True, kw_only=True, tag="callbacks_bound"):
    """CALLBACKS_BOUND installed the scheduler callbacks (`bindings`)."""

    target_type: Annotated[str, Meta(description="the type of the config the callbacks were bound on")]
    target_id: Annotated[str, Meta(description="that config (`0x...` identity)")]
    scheduler_config_id: Annotated[str, Meta(description="the config the schedules read (`0x...` identity)")]
    provider_config_id: Annotated[
        str | None, Meta(description="the provider's config (`0x...` identity); null when it has none")
    ]
    copied: Annotated[bool, Meta(description="the target is a copy of the provider's config")]
    slots: Annotated[list[str], Meta(description="the callback slots installed")]
    chunks: Annotated[int, Meta(description="model chunks bound")]
    overlap_grad_reduce: Annotated[bool, Meta(description="the DDP config's `overlap_grad_reduce`")]
    overlap_param_gather: Annotated[bool, Meta(description="the DDP config's `overlap_param_gather`")]
    policy: Annotated[
        str | None,
        Meta(description="what to do with a slot that holds another callable (`keep`, `replace`; null: refuse)"),
    ]


class CallbacksUnbound(Record, frozen=True, kw_only=True, tag="callbacks_unbound"):
    """The release of CALLBACKS_BOUND cleared the installed callbacks."""

    target_id: Annotated[str, Meta(description="the config they were bound on (`0x...` identity)")]
    slots: Annotated[list[str], Meta(description="the callback slots cleared")]


class RehearsalEnabled(Record, frozen=True, kw_only=True, tag="rehearsal_enabled"):
    """DISTRIBUTED decided to rehearse on CPU stand-ins for CUDA (before the process group)."""

    reason: Annotated[str, Meta(description="`cuda absent`, `forced by config`, `already active (the caller's)`")]


class RehearsalDisabled(Record, frozen=True, kw_only=True, tag="rehearsal_disabled"):
    """DISTRIBUTED decided to run on the real devices (before the process group)."""

    reason: Annotated[str, Meta(description="`cuda available`, `disabled by config`")]
