"""BUILD_MODEL entry work: provider per chunk, DDP wrap, optimizer; `release` drops them.

Follows megatron's `get_model`: the provider is called once per virtual-pipeline chunk with
`pre_process`/`post_process`/`vp_stage` from `parallel_state`; every chunk is wrapped in
`DistributedDataParallel` with `config=get_model_config(model[0])` (the runtime config, not the
provider's), bucketing only on chunk 0; the optimizer comes from `get_megatron_optimizer`; then
the checkpoint, if any, is loaded into both (`checkpoint.py`); last, every setting the validated
config asks for is checked on what the model carries (`settings.py`).
Inference plans stop after building the model: no DDP wrapper, no optimizer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

import bindings
from lifecycle.config import snapshot_config
from lifecycle.core_entry import _interop
from lifecycle.core_entry.providers import model_inputs, provider_config
from lifecycle.core_entry.settings import check_landed, with_names
from lifecycle.core_entry.user_providers import OwnsConfig, check_chunk, display_name, resolve_provider
from lifecycle.errors import ConfigError
from lifecycle.log import JSONValue, records
from lifecycle.resume.checkpoint import checkpoint_source, load_at_build, saved_optimizer_counts
from lifecycle.resume.streams import ResumeWindow
from states import Plan, SideEffect

if TYPE_CHECKING:
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import MegatronOptimizer, OptimizerConfig
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.module import MegatronModule

    from lifecycle.config import RunConfig
    from lifecycle.runtime import GivenProvider, ModelInputs, ModelProvider, PhaseContext, Runtime


def chunk_stages() -> list[tuple[bool, bool, int | None]]:
    """(pre_process, post_process, vp_stage) per chunk, as megatron's `get_model` computes them."""
    from megatron.core import parallel_state as ps

    vpp = ps.get_virtual_pipeline_model_parallel_world_size()
    if ps.get_pipeline_model_parallel_world_size() > 1 and vpp is not None:
        return [
            (
                ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=i),
                ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=i),
                i,
            )
            for i in range(vpp)
        ]
    return [(ps.is_pipeline_first_stage(), ps.is_pipeline_last_stage(), None)]


def prepare_chunk(chunk: MegatronModule) -> MegatronModule:
    """What megatron's `get_model` does to each chunk: a model type, TP defaults on params."""
    from megatron.core import tensor_parallel
    from megatron.core.enums import ModelType

    if not hasattr(chunk, "model_type"):
        chunk.model_type = ModelType.encoder_or_decoder
    for param in chunk.parameters():
        tensor_parallel.set_defaults_if_not_set_tensor_model_parallel_attributes(param)
    return chunk


def build_chunks(
    provider: ModelProvider, config: TransformerConfig, inputs: ModelInputs, name: str = ""
) -> list[MegatronModule]:
    """Call the provider once per chunk, in virtual-pipeline order; check each return value before
    megatron touches it (ProviderError)."""
    chunks = []
    for index, (pre, post, vp) in enumerate(chunk_stages()):
        returned = provider(config, pre_process=pre, post_process=post, vp_stage=vp, inputs=inputs)
        check_chunk(returned, provider=name or display_name(provider), chunk=index, stage=(pre, post, vp))
        chunks.append(prepare_chunk(returned))
    return chunks


def megatron_ddp_config(run: RunConfig) -> DistributedDataParallelConfig:
    from megatron.core.distributed import DistributedDataParallelConfig

    ddp = run.ddp
    return DistributedDataParallelConfig(
        overlap_grad_reduce=ddp.overlap_grad_reduce,
        overlap_param_gather=ddp.overlap_param_gather,
        align_param_gather=ddp.align_param_gather,
        use_distributed_optimizer=ddp.use_distributed_optimizer,
        grad_reduce_in_fp32=ddp.grad_reduce_in_fp32,
        average_in_collective=ddp.average_in_collective,
        bucket_size=ddp.bucket_size,
    )


def wrap_ddp(
    chunks: list[MegatronModule],
    ddp_config: DistributedDataParallelConfig,
    pg_collection: ProcessGroupCollection | None = None,
) -> list[DistributedDataParallel]:
    """Wrap every chunk in megatron's DDP with the runtime config of chunk 0."""
    from megatron.core.distributed import DistributedDataParallel
    from megatron.core.transformer.module import Float16Module
    from megatron.core.utils import get_model_config

    config = get_model_config(chunks[0])
    if config.fp16 or config.bf16:
        chunks = [Float16Module(config, chunk) for chunk in chunks]
    kwargs = {} if pg_collection is None else {"pg_collection": pg_collection}
    return [
        DistributedDataParallel(
            config=config,
            ddp_config=ddp_config,
            module=chunk,
            disable_bucketing=index > 0,
            **kwargs,
        )
        for index, chunk in enumerate(chunks)
    ]


def optimizer_config(run: RunConfig, model_config: TransformerConfig) -> OptimizerConfig:
    """megatron's OptimizerConfig for `run`, with the dtypes of `model_config`."""
    from megatron.core.optimizer import OptimizerConfig

    opt = run.optimizer
    return OptimizerConfig(
        optimizer=opt.optimizer,
        lr=opt.lr,
        min_lr=opt.min_lr,
        weight_decay=opt.weight_decay,
        adam_beta1=opt.adam_beta1,
        adam_beta2=opt.adam_beta2,
        adam_eps=opt.adam_eps,
        clip_grad=opt.clip_grad,
        loss_scale=opt.loss_scale,
        bf16=model_config.bf16,
        fp16=model_config.fp16,
        params_dtype=model_config.params_dtype,
        use_distributed_optimizer=run.ddp.use_distributed_optimizer,
    )


def build_optimizer(
    run: RunConfig, model: list[MegatronModule], pg_collection: ProcessGroupCollection | None = None
) -> MegatronOptimizer:
    """megatron's optimizer (distributed when `ddp.use_distributed_optimizer`)."""
    from megatron.core.optimizer import get_megatron_optimizer
    from megatron.core.utils import get_model_config

    config = optimizer_config(run, get_model_config(model[0]))
    if pg_collection is None:
        return get_megatron_optimizer(config, model)
    # megatron refuses its extra gloo groups with an explicit collection; the collection's own
    # groups carry the distributed optimizer's traffic.
    return get_megatron_optimizer(config, model, use_gloo_process_groups=False, pg_collection=pg_collection)


def init_te_user_buffers(run: RunConfig, model_config: TransformerConfig) -> bool:
    """TE's TP-communication-overlap user buffers, from the *runtime* model config.

    Only reachable with CUDA and transformer-engine (validation refuses `tp_comm_overlap`
    without them); returns whether buffers were initialized.
    """
    if not getattr(model_config, "tp_comm_overlap", False):
        return False
    try:
        from transformer_engine.pytorch import module as te_module
    except ImportError as exc:
        raise ConfigError(
            "parallel.tp_comm_overlap=true needs transformer-engine; install the extra "
            "megatron-lifecycle[te] on a CUDA machine or set parallel.tp_comm_overlap=false",
            field="parallel.tp_comm_overlap",
            problems=[str(exc)],
        ) from exc
    tokens = run.model.seq_length * run.training.micro_batch_size
    tokens //= model_config.context_parallel_size
    te_module.base.initialize_ub(
        shape=[tokens, model_config.hidden_size],
        tp_size=model_config.tensor_model_parallel_size,
        use_fp8=getattr(model_config, "fp8", None) is not None,
        dtype=model_config.params_dtype,
    )
    return True


def enter(ctx: PhaseContext) -> Runtime:
    """Build the model chunks (and DDP + optimizer unless the plan is inference)."""
    from megatron.core.utils import get_model_config

    rt = ctx.runtime
    run = rt.config
    provider = resolve_provider(ctx.provider)
    asked = asked_for(run, provider, training=ctx.plan is not Plan.INFERENCE)  # before anything is built
    ctx.side_effect(SideEffect.MODEL)
    config = provider_config(run, provider)
    chunks = build_chunks(provider, config, model_inputs(run, rt.vocab_size), display_name(ctx.provider))
    model, optimizer, ddp_config = _train_or_eval(ctx, chunks)
    step = load_at_build(ctx, model, optimizer, retarget=_interop.retarget)
    own = provider.own_config if isinstance(provider, OwnsConfig) else None  # a provider object's config
    check_landed(ctx, model, optimizer, own if own is not None else config, asked)
    te_buffers = init_te_user_buffers(run, get_model_config(model[0]))
    rt = dataclasses.replace(rt, te_user_buffers=te_buffers)
    return built(ctx, rt, model, optimizer, provider_config=config, ddp_config=ddp_config, step=step)


def built(
    ctx: PhaseContext,
    runtime: Runtime,
    model: Sequence[MegatronModule],
    optimizer: MegatronOptimizer | None,
    *,
    provider_config: TransformerConfig | None,
    ddp_config: DistributedDataParallelConfig | None,
    step: int,
    position: Callable[[], dict[str, int]] | None = None,
    saved: Callable[[], dict[str, JSONValue] | None] | None = None,
) -> Runtime:
    """MODEL_BUILT's end, for both phase sets: the MODEL_BUILT record and `runtime` holding what was
    built. The model's config is megatron's `get_model_config(model[0])`; `provider_config` is the
    config the provider was given (None: the model's own, as Megatron-LM builds it from its arguments).
    The resume window opens last (`open_window`, with `position` and `saved`): nothing after it can
    fail to take it off."""
    from megatron.core.utils import get_model_config

    config = get_model_config(model[0])
    given = config if provider_config is None else provider_config
    ctx.emit(
        records.ModelBuilt(
            chunks=len(model),
            model_config_id=hex(id(config)),
            provider_config_id=hex(id(given)),
            optimizer=optimizer is not None,
        )
    )
    return dataclasses.replace(
        runtime,
        transformer_config=config,
        provider_config=given,
        model=tuple(model),
        optimizer=optimizer,
        ddp_config=ddp_config,
        checkpoint_step=step,
        transformer_config_snapshot=snapshot_config(config),
        resume_window=open_window(ctx, step, optimizer, position, saved),
    )


def open_window(
    ctx: PhaseContext,
    step: int,
    optimizer: MegatronOptimizer | None,
    position: Callable[[], dict[str, int]] | None = None,
    saved: Callable[[], dict[str, JSONValue] | None] | None = None,
) -> ResumeWindow | None:
    """After a checkpoint load (`step` > 0), at MODEL_BUILT's end: the streams hashed, the window to the
    first step opened (`streams_restored`); None for fresh weights. `position` reads the data position
    where the caller knows it (the Megatron-LM drop-in's consumed samples and iteration); `saved` reads the
    optimizer counts the loaded checkpoint was saved with where the caller loaded it (the drop-in: from
    Megatron-LM's checkpoint), else they are the ones this lifecycle's save kept."""
    if step <= 0:
        return None
    read = saved if saved is not None else partial(_saved_here, ctx)
    window = ResumeWindow.open(step, optimizer, read() if optimizer is not None else None, position)
    ctx.emit(window.restored_record())
    return window


def _saved_here(ctx: PhaseContext) -> dict[str, JSONValue] | None:
    """The optimizer counts the checkpoint `load_at_build` loaded was saved with (its common state)."""
    source = checkpoint_source(ctx.runtime.config, ctx.runtime.generation)
    return saved_optimizer_counts(source[0]) if source is not None else None


def asked_for(run: RunConfig, provider: GivenProvider, *, training: bool) -> bindings.Requested:
    """What the validated config asks for, built again from it (the objects the provider, DDP and the
    optimizer were given may have been changed in place since). A provider object with its own config
    (`.provide()`, a ModelBuilder, a ModelConfig) asks for that config's fields, as they were when it
    was given (`asked`; `own_config` has its dtypes)."""
    resolved = resolve_provider(provider)
    own = resolved.asked if isinstance(resolved, OwnsConfig) else None
    asked = provider_config(run, resolved)
    dtypes = resolved.own_config if isinstance(resolved, OwnsConfig) and own is not None else asked
    ddp = megatron_ddp_config(run) if training else None
    named = with_names(bindings.requested(asked, ddp, optimizer_config(run, dtypes) if training else None))
    if own is None:
        return named
    theirs = {k: v for k, v in named.asked_as.items() if not k.startswith("transformer.")}
    return dataclasses.replace(named, transformer=own.transformer, asked_as=theirs)


def _train_or_eval(
    ctx: PhaseContext, chunks: list[MegatronModule]
) -> tuple[list[MegatronModule], MegatronOptimizer | None, DistributedDataParallelConfig | None]:
    """The chunks in eval mode for inference; else wrapped in DDP, with their optimizer."""
    if ctx.plan is Plan.INFERENCE:
        for chunk in chunks:
            chunk.eval()
        return chunks, None, None
    run, groups = ctx.runtime.config, ctx.runtime.pg_collection
    ddp_config = megatron_ddp_config(run)
    model = wrap_ddp(chunks, ddp_config, groups)
    return model, build_optimizer(run, model, groups), ddp_config


def release(ctx: PhaseContext, runtime: Runtime) -> Runtime:
    """Drop the model, optimizer and configs (TE user buffers too). Tolerates partial state."""
    if runtime.te_user_buffers:
        from transformer_engine.pytorch import module as te_module

        te_module.base.destroy_ub()
    if runtime.resume_window is not None:  # no first step came: its wrappers come off unchecked
        runtime.resume_window.close()
    return dataclasses.replace(
        runtime,
        resume_window=None,
        model=None,
        optimizer=None,
        ddp_config=None,
        transformer_config=None,
        provider_config=None,
        te_user_buffers=False,
        transformer_config_snapshot=None,
        checkpoint_step=None,
    )
