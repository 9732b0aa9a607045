"""The records of the training steps, the checkpoints, the Megatron-LM drop-in and the shutdown
(`lifecycle.log.schema` puts them in order)."""

from __future__ import annotations

from typing import Annotated

from msgspec import UNSET, Meta, UnsetType

from lifecycle.log._schema_base import Record

Step = Annotated[int, Meta(description="the training step (1 is the first)")]
Chunks = Annotated[int, Meta(description="model chunks")]
Duration = Annotated[float, Meta(description="seconds it took")]
OptimizerCounts = Annotated[
    dict[str, object] | UnsetType,
    Meta(
        description="the optimizer's counts then: `steps` (Adam's distinct step counts), `loss_scale` (null without a "
        "grad scaler); absent without an optimizer"
    ),
]
Position = Annotated[
    dict[str, int] | UnsetType,
    Meta(
        description="the data position: `consumed_samples` and `iteration` (the Megatron-LM drop-in's); absent "
        "where the caller does not say how to read it"
    ),
]
SavedCounts = Annotated[
    dict[str, object] | UnsetType,
    Meta(description="the counts the checkpoint was saved with, in the same shape; absent for one saved without them"),
]


class FirstStepFinalized(Record, frozen=True, kw_only=True, tag="first_step_finalized"):
    """The binding's watchdog saw the first step's grads finalized exactly once."""

    finalizer_calls: Annotated[int, Meta(description="calls of the grad finalizer during the step (== 1)")]
    step: Annotated[int | UnsetType, Meta(description="the step checked (the Megatron-LM drop-in's guard)")] = UNSET


class FirstStepNotFinalized(Record, frozen=True, kw_only=True, tag="first_step_not_finalized"):
    """The binding's watchdog saw the first step's grads finalized never or more than once;
    `FinalizerNotCalled` follows."""

    finalizer_calls: Annotated[int, Meta(description="calls of the grad finalizer during the step (0 or > 1)")]
    step: Annotated[int | UnsetType, Meta(description="the step checked (the Megatron-LM drop-in's guard)")] = UNSET


class StepCompleted(Record, frozen=True, kw_only=True, tag="step_completed"):
    """A training step ended (after its optimizer step)."""

    step: Step
    loss: Annotated[float | None, Meta(description="the step's loss, when the caller gave it")]
    duration_s: Duration


class ParamGatherDeferred(Record, frozen=True, kw_only=True, tag="param_gather_deferred"):
    """Step 1 runs without the forward pre-hook gather
    ([bindings](bindings.md#around-the-steps-megatron-lms-train-loop))."""

    step: Step
    chunks: Chunks
    param_sync_func: Annotated[bool, Meta(description="a bound `param_sync_func` was taken off")]


class ParamGatherResumed(Record, frozen=True, kw_only=True, tag="param_gather_resumed"):
    """The pre-hooks and `param_sync_func` are back after the first step that succeeded."""

    step: Step
    chunks: Chunks


class ParamsSynced(Record, frozen=True, kw_only=True, tag="params_synced"):
    """The parameters were gathered outside a step (after the last one, before a checkpoint save)."""

    reason: Annotated[str, Meta(description="`after_last_step`, `before_checkpoint_save`, or the caller's")]
    step: Annotated[int | None, Meta(description="the last completed step, or null")]
    chunks: Chunks


class CheckpointLoaded(Record, frozen=True, kw_only=True, tag="checkpoint_loaded"):
    """A checkpoint was loaded: during `build_model`, before `model_built`."""

    path: Annotated[str, Meta(description="the `iter_NNNNNNN` directory")]
    step: Annotated[int, Meta(description="the checkpoint's step")]
    source: Annotated[str, Meta(description="`checkpoint.load`, or `checkpoint.save` after a restart")]
    optimizer: Annotated[bool, Meta(description="the optimizer state was loaded too")]
    streams: Annotated[
        bool | UnsetType,
        Meta(
            description="every rank's random streams were restored from it (a checkpoint this version saved for "
            "a world of this size); absent in older logs"
        ),
    ] = UNSET
    duration_s: Duration
    retargeted_from: Annotated[
        str | UnsetType,
        Meta(
            description='`"GPTModel"`, only when a GPTModel checkpoint was translated for the HybridModel this run '
            "builds, docs/adopting.md"
        ),
    ] = UNSET


class CheckpointSaved(Record, frozen=True, kw_only=True, tag="checkpoint_saved"):
    """A checkpoint was saved: after the steps of `lifecycle run` (`checkpoint.save`)."""

    path: Annotated[str, Meta(description="the `iter_NNNNNNN` directory")]
    step: Annotated[int, Meta(description="the step saved")]
    duration_s: Duration


class StreamsRestored(Record, frozen=True, kw_only=True, tag="streams_restored"):
    """After MODEL_BUILT loaded a checkpoint: a hash of every random stream, and the window to the first
    step opened (`lifecycle.resume.streams`, [adopting.md](adopting.md#checkpoints))."""

    step: Annotated[int, Meta(description="the loaded checkpoint's step")]
    streams: Annotated[
        dict[str, str],
        Meta(
            description="stream → short hash of its state: `python`, `numpy`, `torch`, `cuda:<i>` where CUDA is "
            "initialized, `megatron:<tracker state>`"
        ),
    ]
    watched: Annotated[int, Meta(description="draw and seed entry points wrapped until the first step")]
    optimizer: OptimizerCounts = UNSET
    saved_optimizer: SavedCounts = UNSET
    position: Position = UNSET


class StreamsChecked(Record, frozen=True, kw_only=True, tag="streams_checked"):
    """At the first step after a checkpoint load: the streams hashed again; audit rule LA027 reads it."""

    step: Annotated[int, Meta(description="the first step's number")]
    restored_step: Annotated[int, Meta(description="the loaded checkpoint's step: the first step should be the next")]
    moved: Annotated[
        list[dict[str, str]],
        Meta(
            description="each stream whose state changed since the load (a `data:` stream: since it was given, or "
            "that a torch draw took as `generator=` in the window): stream, restored, found (hashes), caller "
            "(file:line in function (entry point) of the first draw or seed)"
        ),
    ]
    streams: Annotated[int, Meta(description="streams hashed, the data's included")]
    data: Annotated[
        dict[str, str] | UnsetType,
        Meta(
            description="each random stream of the data the training loop was given (`data:<path>`: a DataLoader's, "
            "a sampler's or a dataset's generator, a sampler's position) → its short hash when it was given; "
            "absent when no data was given or none was found ([adopting.md](adopting.md#checkpoints))"
        ),
    ] = UNSET
    optimizer: OptimizerCounts = UNSET
    saved_optimizer: SavedCounts = UNSET
    position: Annotated[
        dict[str, int] | UnsetType,
        Meta(description="the data position at the first step's start, in `streams_restored`'s shape; absent there"),
    ] = UNSET
    restored_position: Annotated[
        dict[str, int] | UnsetType,
        Meta(
            description="the data position after the load (`streams_restored`'s `position`): the first step's "
            "must be it"
        ),
    ] = UNSET
    duration_s: Duration


class GenerationStarted(Record, frozen=True, kw_only=True, tag="generation_started"):
    """A new generation begins: written with the new `generation`."""

    reason: Annotated[str, Meta(description="why (`restart`)")]


class LifecycleShutdown(Record, frozen=True, kw_only=True, tag="lifecycle_shutdown"):
    """The shutdown released what the startup made, before its `transition_completed`."""

    source: Annotated[str, Meta(description="the state the shutdown started from")]
    leaked: Annotated[
        list[dict[str, str]] | UnsetType,
        Meta(
            description="a list of `{resource, state}`: what the ledger's one probe found still alive; absent when "
            "nothing is, [LA023](rules/LA023.md)"
        ),
    ] = UNSET
    log_fault: Annotated[str | UnsetType, Meta(description="after a log write failure: the error")] = UNSET
    unlogged: Annotated[int | UnsetType, Meta(description="after a log write failure: records sent to stderr")] = UNSET
    lost: Annotated[int | UnsetType, Meta(description="after a log write failure: records written nowhere")] = UNSET


class ResourcesHandedOver(Record, frozen=True, kw_only=True, tag="resources_handed_over"):
    """The Megatron-LM drop-in's `pretrain` returns with what Megatron-LM's leaves up (the default
    process group, parallel state, global args, …): no longer the lifecycle's to release, so no leak
    ([adopting.md](adopting.md))."""

    state: Annotated[str, Meta(description="the state whose resources are handed over")]
    resources: Annotated[list[str], Meta(description="the resources handed over")]


class CallbackReplaced(Record, frozen=True, kw_only=True, tag="callback_replaced"):
    """A write to a scheduler callback slot during Megatron-LM's `train()` by anyone but `train()`
    itself (a script's or profiler's rewrap): it goes through as under Megatron-LM
    ([adopting.md](adopting.md))."""

    slot: Annotated[str, Meta(description="the callback slot")]
    was: Annotated[str, Meta(description="the callable it held (short form)")]
    now: Annotated[str, Meta(description="the callable written (short form)")]
    writer: Annotated[str, Meta(description="who wrote it (`module:function`)")]
