"""The states of a Megatron startup and the triggers that move between them."""

from __future__ import annotations

import enum


class State(enum.Enum):
    """Where a lifecycle stands. The startup order is the declaration order of the first six."""

    CONFIGURED = "CONFIGURED"
    VALIDATED = "VALIDATED"
    SERVICES_READY = "SERVICES_READY"
    DISTRIBUTED = "DISTRIBUTED"
    MODEL_BUILT = "MODEL_BUILT"
    CALLBACKS_BOUND = "CALLBACKS_BOUND"
    FAILED = "FAILED"
    SHUT_DOWN = "SHUT_DOWN"

    @property
    def startup_index(self) -> int:
        """Position in the startup order; -1 for FAILED and SHUT_DOWN."""
        return STARTUP_ORDER.index(self) if self in STARTUP_ORDER else -1


class Trigger(str, enum.Enum):
    """Events that move a lifecycle. Values are the method names on `Lifecycle`."""

    VALIDATE = "validate"
    START_SERVICES = "start_services"
    INIT_DISTRIBUTED = "init_distributed"
    BUILD_MODEL = "build_model"
    BIND_CALLBACKS = "bind_callbacks"
    REBUILD = "rebuild"
    RESTART = "restart"
    FAIL = "fail"
    SHUTDOWN = "shutdown"


class SideEffect(str, enum.Enum):
    """Kinds of side effect; each has exactly one owning trigger (`SIDE_EFFECT_OWNERS`)."""

    FILES = "files"
    TOKENIZER = "tokenizer"
    WRITERS = "writers"
    PROCESS_GROUP = "process_group"
    PARALLEL_STATE = "parallel_state"
    RNG = "rng"
    CUDA_DEVICE = "cuda_device"
    MODEL = "model"
    CALLBACKS = "callbacks"


class Plan(str, enum.Enum):
    """What a lifecycle is started for; decides its target state and which services it starts."""

    TRAINING = "training"
    INFERENCE = "inference"
    CONVERT = "convert"
    RL = "rl"


STARTUP_ORDER: tuple[State, ...] = (
    State.CONFIGURED,
    State.VALIDATED,
    State.SERVICES_READY,
    State.DISTRIBUTED,
    State.MODEL_BUILT,
    State.CALLBACKS_BOUND,
)

SIDE_EFFECT_OWNERS: dict[SideEffect, Trigger] = {
    SideEffect.FILES: Trigger.START_SERVICES,
    SideEffect.TOKENIZER: Trigger.START_SERVICES,
    SideEffect.WRITERS: Trigger.START_SERVICES,
    SideEffect.PROCESS_GROUP: Trigger.INIT_DISTRIBUTED,
    SideEffect.PARALLEL_STATE: Trigger.INIT_DISTRIBUTED,
    SideEffect.RNG: Trigger.INIT_DISTRIBUTED,
    SideEffect.CUDA_DEVICE: Trigger.INIT_DISTRIBUTED,
    SideEffect.MODEL: Trigger.BUILD_MODEL,
    SideEffect.CALLBACKS: Trigger.BIND_CALLBACKS,
}

PLAN_TARGETS: dict[Plan, State] = {
    Plan.TRAINING: State.CALLBACKS_BOUND,
    Plan.INFERENCE: State.MODEL_BUILT,
    Plan.CONVERT: State.SERVICES_READY,
    Plan.RL: State.CALLBACKS_BOUND,
}
