"""`MegatronLMPhases`: each state's entry work done by Megatron-LM's own function for it.

- VALIDATED: the provider's shape, the container against the args, the lifecycle's checks of the
  RunConfig derived from the args, and Megatron-LM's `validate_args` when the script did not run
  it: every problem in one ConfigError, before any side effect.
- SERVICES_READY: Megatron-LM's `set_global_variables` (tokenizer with the padded vocab, writers,
  timers, micro-batch calculator); adopted, and recorded as such, when the script's
  `parse_and_validate_args` already ran it.
- DISTRIBUTED: the rerun state machine, `_initialize_distributed` (process group, parallel state),
  `_set_random_seed`, the autoresume and dataset-helper steps, then the JIT warm-up (it draws
  random numbers, so it runs where `pretrain` runs it: right after the seeds), all under the
  tripwires; in a CPU rehearsal when CUDA is absent.
- MODEL_BUILT: `setup_model_and_optimizer` (model from the container's ModelConfig or the provider
  called by keyword, DDP, optimizer, scheduler, checkpoint load); its record and runtime made by the
  real phase's `model_built.built`, which opens the resume window after a load with Megatron-LM's
  data position and the optimizer counts its checkpoint was saved with.
- CALLBACKS_BOUND: the lifecycle's `bindings`, verified (lifecycle.core_entry.callbacks_bound).

From DISTRIBUTED on, a multi-rank job's entry work runs under the rank watch that DISTRIBUTED
starts (`_distributed.py`), as the lifecycle's own phases do.
"""

from __future__ import annotations

import dataclasses
from argparse import Namespace
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import bindings
from lifecycle.config import normalize, raise_for, validate
from lifecycle.core_entry import MegatronPhases
from lifecycle.core_entry import callbacks_bound as lifecycle_binding
from lifecycle.core_entry.model_built import built
from lifecycle.core_entry.settings import check_landed
from lifecycle.lm_dropin.entry import _derive, _late, _providers, _resources
from lifecycle.lm_dropin.entry._call import MegatronLMCall as MegatronLMCall
from lifecycle.lm_dropin.entry._distributed import initialize
from lifecycle.lm_dropin.entry._handover import HandOver, releasing_distributed, releasing_services
from lifecycle.log import JSONValue, records
from lifecycle.rankwatch import watched
from lifecycle.resume.checkpoint import megatron_lm_optimizer_counts
from lifecycle.runtime import Entry, PhaseContext, Runtime, Work
from states import STARTUP_ORDER, SideEffect, State

if TYPE_CHECKING:
    from lifecycle.config import Problem
    from lifecycle.runtime import ModelInputs


class MegatronLMPhases(MegatronPhases):
    """The lifecycle's states with Megatron-LM's functions as their work. The releases and `drift`
    are the real phases' (they undo what these built the same way), DISTRIBUTED's also destroying
    the rerun state machine and MODEL_BUILT's also dropping the scheduler; SERVICES_READY's unsets
    Megatron-LM's global variables when they were made here (`_resources.py`, which also names
    what these make for the ledger). Once `hand_over()` is called (`pretrain` trained), the
    shutdown leaves up what Megatron-LM's `pretrain` leaves up (`_handover.py`)."""

    def __init__(self, call: MegatronLMCall) -> None:
        super().__init__()
        self.call = call
        real = {state: self.phase_for(state) for state in STARTUP_ORDER[1:]}
        own: dict[State, Entry] = {State.SERVICES_READY: _resources.release_services}
        for state, enter in (
            (State.VALIDATED, partial(_validate, call)),
            (State.SERVICES_READY, partial(_start_services, call)),
            (State.DISTRIBUTED, partial(initialize, call=call)),
            (State.MODEL_BUILT, partial(_build_model, call)),
            (State.CALLBACKS_BOUND, lifecycle_binding.enter),
        ):
            inner = real[state]
            assert inner is not None  # MegatronPhases registers every startup state after CONFIGURED
            self.register(state, Work(enter, own.get(state, inner.release)))
        self.around(State.DISTRIBUTED, release=_destroying_rerun_state)
        self.around(State.MODEL_BUILT, release=_resources.dropping_scheduler)
        self.hand_over = HandOver()
        """Called once `pretrain` has trained: what Megatron-LM's leaves up stays up (`_handover.py`)."""
        self.around(State.DISTRIBUTED, release=partial(releasing_distributed, self.hand_over))
        self.around(State.SERVICES_READY, release=partial(releasing_services, self.hand_over))
        for watched_state in (State.MODEL_BUILT, State.CALLBACKS_BOUND):
            self.around(watched_state, enter=partial(_watched, watched_state))

    def resources(self, state: State, runtime: Runtime) -> list[tuple[str, Callable[[], bool]]]:
        """What `state`'s work made: the real phases' resources, and Megatron-LM's own (SERVICES_READY's
        writers are Megatron-LM's global variables, named with the others: the runtime holds none)."""
        real = super().resources(state, runtime)
        return self.hand_over.probes(state, [*real, *_resources.resources(state, runtime)])


def _validate(call: MegatronLMCall, ctx: PhaseContext) -> Runtime:
    """The provider's shape, the container against the args, the RunConfig's checks, `validate_args`."""
    run = ctx.runtime.config
    problems = list(_derive.disagreements(call.cfg_container, call.args))
    shape = _providers.problem(call.model_provider)
    if shape is not None:
        from lifecycle.config import Problem

        problems.append(
            Problem(
                check="megatron_lm_provider",
                field="model_provider",
                value=type(call.model_provider).__name__,
                message=shape,
                fix="see the message",
            )
        )
    problems += _patches_not_run()
    problems += _flags_not_run(call.args)
    used, rewrites = normalize(run)
    problems += validate(used, environment=ctx.options.environment_checks)
    if not call.args_validated:
        problems += _megatron_validation(call.args) or _derive.lost_in_args(call.cfg_container, call.args)
    raise_for(problems)
    for rewrite in rewrites:
        ctx.emit(records.ConfigNormalized(field=rewrite.field, given=rewrite.given, used=rewrite.used, why=rewrite.why))
    fingerprint = run.fingerprint()
    ctx.emit(
        records.ConfigValidated(
            fingerprint=fingerprint, config=records.redacted(run.to_dict()), environment=ctx.options.environment_checks
        )
    )
    return dataclasses.replace(ctx.runtime, config=used, fingerprint=fingerprint)


def _patches_not_run() -> list[Problem]:
    """A script's replacement of a name Megatron-LM's startup looks up that the drop-in does not call
    (`_late.LOOKUPS`): refused, naming it, rather than ignored."""
    from lifecycle.config import Problem

    return [
        Problem(
            check="megatron_lm_patch_not_run",
            field=name,
            value=patch,
            message=f"{name} is replaced by {patch}, which Megatron-LM's pretrain would call; the drop-in does not run "
            f"that part of pretrain ({_late.why(name)})",
            fix="patch the function the drop-in calls instead (docs/adopting.md#names-looked-up-when-they-run), "
            "or call megatron.training.pretrain",
        )
        for name, patch in _late.refused()
    ]


def _flags_not_run(args: Namespace) -> list[Problem]:
    """A Megatron-LM flag whose work the drop-in does not do (`_late.FLAGS_REFUSED`): refused, naming
    it, rather than ignored."""
    from lifecycle.config import Problem

    return [
        Problem(
            check="megatron_lm_flag_not_run",
            field=flag,
            value=True,
            message=f"{flag} asks for {what}",
            fix=f"drop {flag}, or call megatron.training.pretrain",
        )
        for flag, what in _late.flags_refused(args)
    ]


def _start_services(call: MegatronLMCall, ctx: PhaseContext) -> Runtime:
    from megatron.training import get_tokenizer, global_vars

    args = call.args
    adopted = global_vars._GLOBAL_ARGS is args
    if not adopted:
        ctx.side_effect(SideEffect.TOKENIZER)
        ctx.side_effect(SideEffect.WRITERS)
        try:
            global_vars.set_global_variables(args)
        except BaseException:  # what it set before it failed is ours: release it as it would be
            _resources.release_globals()
            raise
    tokenizer = get_tokenizer()
    ctx.emit(
        records.ServicesReady(
            tokenizer=type(tokenizer).__name__,
            vocab_size=args.padded_vocab_size,
            vocab_source="parse_and_validate_args" if adopted else "set_global_variables",
        )
    )
    return dataclasses.replace(  # the writers and timers stay Megatron-LM's global variables, read from there
        ctx.runtime if adopted else _created(ctx.runtime),
        services_ready=True,
        tokenizer=tokenizer,
        vocab_size=args.padded_vocab_size,
        vocab_source="megatron-lm",
    )


def _created(rt: Runtime) -> Runtime:
    """`rt` marked as holding Megatron-LM's global variables made here (SERVICES_READY releases them)."""
    return dataclasses.replace(rt, megatron_lm_globals=True)


def _build_model(call: MegatronLMCall, ctx: PhaseContext) -> Runtime:
    from megatron.training.training import setup_model_and_optimizer

    rt = ctx.runtime
    provider = _keyword_provider(call, rt)
    asked = _asked(call)
    ctx.side_effect(SideEffect.MODEL)
    model, optimizer, scheduler = setup_model_and_optimizer(
        call.model_type,
        model_provider_func=provider,
        checkpointing_context=call.checkpointing_context,
        cfg_container=call.cfg_container,
        pg_collection=rt.pg_collection,
    )
    check_landed(ctx, model, optimizer, None, asked)
    return built(
        ctx,
        dataclasses.replace(rt, scheduler=scheduler),
        model,
        optimizer,
        provider_config=None,  # Megatron-LM builds from its arguments: the model's config
        ddp_config=call.cfg_container.ddp,
        step=int(call.args.iteration),  # setup_model_and_optimizer set it: 0, or > 0 after a load
        position=partial(_position, call.args),
        saved=partial(_saved, call.args),
    )


def _position(args: Namespace) -> dict[str, int]:
    """Megatron-LM's data position: its samples consumed and its iteration (the sampler starts from
    them; `train()` advances both after each step, so at the first step's start they are the load's)."""
    return {"consumed_samples": int(args.consumed_train_samples), "iteration": int(args.iteration)}


def _saved(args: Namespace) -> dict[str, JSONValue] | None:
    """The optimizer counts the checkpoint Megatron-LM's load read was saved with, from its common state:
    `args.load`'s directory of the iteration loaded. Called once a load from `args.load` set
    `args.iteration` > 0 (`--pretrained-checkpoint` alone fine-tunes from 0). A newer non-persistent
    checkpoint preferred to it (not in that directory), or an `--override-ckpt-iteration`, leaves
    `args.iteration` another, and nothing is compared."""
    from megatron.training import checkpointing

    loaded = getattr(checkpointing, "get_loaded_iteration", None)  # megatron-core 0.19; the iteration loaded
    iteration = loaded() if loaded is not None else args.iteration
    if not isinstance(iteration, int):  # megatron read no checkpoint itself
        return None
    path = Path(checkpointing.get_checkpoint_name(args.load, iteration, return_base_dir=True))
    return megatron_lm_optimizer_counts(path, int(args.iteration))


def _asked(call: MegatronLMCall) -> bindings.Requested:
    """What the script asks of the model, taken before megatron builds it: the container's model
    config (what `setup_model_and_optimizer` builds from; from a YAML or dict it is the request, and
    the arguments derived from it do not carry every field), else the TransformerConfig
    `core_transformer_config_from_args` makes of the arguments; the container's DDP and optimizer
    configs."""
    from megatron.training.arguments import core_transformer_config_from_args

    container = call.cfg_container
    transformer = getattr(getattr(container, "model", None), "transformer", None)
    return bindings.requested(
        transformer if transformer is not None else core_transformer_config_from_args(call.args),
        getattr(container, "ddp", None),
        getattr(container, "optimizer", None),
    )


def _watched(state: State, ctx: PhaseContext, enter: Entry) -> Runtime:
    """`state`'s entry work under the rank watch DISTRIBUTED started, as the real phases run it."""
    with watched(ctx, state.name):
        return enter(ctx)


def _destroying_rerun_state(ctx: PhaseContext, release: Entry) -> Runtime:
    """DISTRIBUTED's release, then the rerun state machine `initialize` created with it."""
    held = ctx.runtime.distributed
    try:
        return release(ctx)
    finally:
        if held:
            from megatron.core.rerun_state_machine import destroy_rerun_state_machine

            destroy_rerun_state_machine()


def _keyword_provider(call: MegatronLMCall, rt: Runtime) -> _providers.KeywordProvider | None:
    """The user's model provider, called by keyword with what it asks for; None without one."""
    if call.model_provider is None:
        return None
    from megatron.training.arguments import core_transformer_config_from_args

    return _providers.KeywordProvider(
        call.model_provider, inputs=_inputs(rt), transformer_config=core_transformer_config_from_args(call.args)
    )


def _inputs(rt: Runtime) -> ModelInputs:
    from lifecycle.core_entry.providers import model_inputs

    return model_inputs(rt.config, rt.vocab_size)


def _megatron_validation(args: Namespace) -> list[Problem]:
    """Megatron-LM's `validate_args` on args derived from a container; its assertion as a Problem."""
    from megatron.training.arguments import validate_args

    from lifecycle.config import Problem
    from lifecycle.lm_dropin.entry._args_dump import masked_dump

    try:
        with masked_dump():  # its dump of the arguments goes to stdout: credentials masked
            validate_args(args)
    except (AssertionError, ValueError) as exc:
        return [
            Problem(
                check="megatron_lm_validate_args",
                field="cfg_container",
                value=None,
                message=f"Megatron-LM's validate_args: {exc}",
                fix="change the config as the message says",
            )
        ]
    return []
