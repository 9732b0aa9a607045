"""One source of truth: the lifecycle's RunConfig derived from Megatron-LM's arguments, and those
arguments derived from a `PretrainConfigContainer` when the script built none.

A container made by `pretrain_cfg_container_from_args(args, ...)` agrees with its args by
construction; one edited afterwards (or built from YAML while the script also parsed arguments)
may not, and `disagreements` lists every field where the two say different things, so the run is
refused at VALIDATED instead of training something the log does not describe.
"""

from __future__ import annotations

from argparse import Namespace
from dataclasses import fields, is_dataclass
from typing import TYPE_CHECKING

from lifecycle import launchers
from lifecycle.config import Problem, RunConfig
from lifecycle.log import JSONValue

if TYPE_CHECKING:
    from megatron.core.transformer import TransformerConfig
    from megatron.training.config.container import PretrainConfigContainer

# Sections of the container whose fields are named as Megatron-LM's arguments are.
SECTIONS = (
    "train",
    "validation",
    "optimizer",
    "scheduler",
    "ddp",
    "dist",
    "rng",
    "logger",
    "checkpoint",
    "tokenizer",
    "model",
    "model.transformer",
)
# Container field -> argument, where the names differ.
RENAMED = {
    "ddp.bucket_size": "ddp_bucket_size",
    "ddp.average_in_collective": "ddp_average_in_collective",
    "ddp.grad_reduce_in_fp32": "accumulate_allreduce_grads_in_fp32",
    # Megatron-LM's core_transformer_config_from_args renames these arguments into the transformer config
    "model.transformer.num_moe_experts": "num_experts",
    "model.transformer.num_layers_in_first_pipeline_stage": "decoder_first_pipeline_num_layers",
    "model.transformer.num_layers_in_last_pipeline_stage": "decoder_last_pipeline_num_layers",
    "model.transformer.fp8_param": "fp8_param_gather",
    "model.transformer.fp4_param": "fp4_param_gather",
}
# Container field -> argument, where the argument says the opposite (core_transformer_config_from_args).
NEGATED = {
    "model.transformer.persist_layer_norm": "no_persist_layer_norm",
    "model.transformer.batch_p2p_comm": "overlap_p2p_comm",
}
# Transformer fields Megatron-LM makes from another argument (the container's `rng.seed`): a container
# edited there and not here gives the argument's value, as Megatron-LM's own `pretrain` would.
FROM_ANOTHER_ARGUMENT = {"inference_sampling_seed": "seed"}
# Container field -> the arguments it is made of, whichever applies (gelu's or swiglu's bias fusion).
EITHER = {"model.transformer.bias_activation_fusion": ("bias_gelu_fusion", "bias_swiglu_fusion")}
# What the model is: a disagreement here trains another model than the one logged.
CHECKED = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "ffn_hidden_size",
    "seq_length",
    "max_position_embeddings",
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "micro_batch_size",
    "global_batch_size",
    "train_iters",
    "lr",
    "seed",
)

# Arguments `validate_args` computes and stores, which a container built from validated args carries.
DERIVED_BY_VALIDATE_ARGS = ("start_weight_decay", "end_weight_decay")


def container_items(container: PretrainConfigContainer) -> dict[str, tuple[str, object]]:
    """argument name -> (container path, value) for every dataclass field of the container's sections."""
    items: dict[str, tuple[str, object]] = {}
    for section in SECTIONS:
        part: object = container
        for name in section.split("."):
            part = getattr(part, name, None)
        if part is None or not is_dataclass(part):
            continue
        for f in fields(part):
            path = f"{section}.{f.name}"
            try:
                value = getattr(part, f.name)
            except Exception:
                continue
            items.setdefault(RENAMED.get(path, f.name), (path, value))
    return items


def disagreements(container: PretrainConfigContainer, args: Namespace) -> list[Problem]:
    """The model-defining fields where the container and Megatron-LM's arguments differ."""
    items = container_items(container)
    problems = []
    for name in CHECKED:
        if name not in items or not hasattr(args, name):
            continue
        path, value = items[name]
        if value is not None and value != getattr(args, name):
            problems.append(
                Problem(
                    check="megatron_lm_one_source",
                    field=path,
                    value=value,
                    message=f"the PretrainConfigContainer says {value!r}, Megatron-LM's args say "
                    f"{getattr(args, name)!r} ({name})",
                    fix="build the container from the args (pretrain_cfg_container_from_args) or edit one of them only",
                )
            )
    return problems


def args_from_container(container: PretrainConfigContainer) -> Namespace:
    """Megatron-LM's arguments for a container built without them (YAML, dict): the parser's
    defaults, overridden by every container field of the same name. Not yet validated."""
    import argparse

    from megatron.training.arguments import add_megatron_arguments

    args: Namespace = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False)).parse_args([])
    defaults = argparse.Namespace(**vars(args))
    args._is_global_batch_size_explicitly_specified = True
    for name, (path, value) in container_items(container).items():
        if path in NEGATED and isinstance(value, bool):
            setattr(args, NEGATED[path], not value)
        elif path in EITHER:
            for either in EITHER[path]:
                setattr(args, either, value)
        elif hasattr(args, name):
            setattr(args, name, value)
    _activation(args, getattr(getattr(container, "model", None), "transformer", None))
    for name in DERIVED_BY_VALIDATE_ARGS:  # validate_args derives them again (and asserts they are unset)
        setattr(args, name, getattr(defaults, name))
    if args.max_position_embeddings is None:  # the container's GPT config has only seq_length
        args.max_position_embeddings = args.seq_length
    args.rank = launchers.rank() or 0
    args.world_size = launchers.world_size() or 1
    return args


def _dtype(args: Namespace) -> str:
    return "bf16" if getattr(args, "bf16", False) else "fp16" if getattr(args, "fp16", False) else "fp32"


def _model(args: Namespace) -> dict[str, JSONValue]:
    return {
        "num_layers": args.num_layers,
        "hidden_size": args.hidden_size,
        "num_attention_heads": args.num_attention_heads,
        "num_query_groups": args.num_query_groups if getattr(args, "group_query_attention", False) else None,
        "ffn_hidden_size": args.ffn_hidden_size,
        "seq_length": args.seq_length,
        "vocab_size": getattr(args, "padded_vocab_size", None) or args.vocab_size,
        "max_position_embeddings": args.max_position_embeddings,
        "make_vocab_size_divisible_by": args.make_vocab_size_divisible_by,
        "dtype": _dtype(args),
        "transformer_impl": "local" if args.transformer_impl == "local" else "transformer_engine",
        "init_method_std": args.init_method_std,
        "hidden_dropout": args.hidden_dropout,
        "attention_dropout": args.attention_dropout,
        "num_moe_experts": args.num_experts,
        "add_bias_linear": args.add_bias_linear,
        "share_embeddings_and_output_weights": not args.untie_embeddings_and_output_weights,
    }


def _parallel(args: Namespace) -> dict[str, JSONValue]:
    return {
        "tp": args.tensor_model_parallel_size,
        "pp": args.pipeline_model_parallel_size,
        "cp": args.context_parallel_size,
        "ep": args.expert_model_parallel_size,
        "etp": args.expert_tensor_parallel_size,
        "vpp": getattr(args, "virtual_pipeline_model_parallel_size", None),  # validate_args sets it
        "sequence_parallel": args.sequence_parallel,
        "tp_comm_overlap": args.tp_comm_overlap,
    }


def _ddp(args: Namespace) -> dict[str, JSONValue]:
    return {
        "overlap_grad_reduce": args.overlap_grad_reduce,
        "overlap_param_gather": args.overlap_param_gather,
        "align_grad_reduce": args.align_grad_reduce,
        "align_param_gather": args.align_param_gather,
        "use_distributed_optimizer": args.use_distributed_optimizer,
        "grad_reduce_in_fp32": args.accumulate_allreduce_grads_in_fp32,
        "average_in_collective": args.ddp_average_in_collective,
        "bucket_size": args.ddp_bucket_size,
    }


def _optimizer(args: Namespace) -> dict[str, JSONValue]:
    return {
        "optimizer": "sgd" if args.optimizer == "sgd" else "adam",
        "lr": args.lr,
        "min_lr": args.min_lr,
        "weight_decay": args.weight_decay,
        "adam_beta1": args.adam_beta1,
        "adam_beta2": args.adam_beta2,
        "adam_eps": args.adam_eps,
        "clip_grad": args.clip_grad,
        "loss_scale": args.loss_scale,
    }


def _data_parallel(args: Namespace) -> int:
    """`validate_args` sets it; before that it follows from the world size and the model-parallel sizes."""
    dp = getattr(args, "data_parallel_size", None)
    if dp:
        return int(dp)
    model_parallel = args.tensor_model_parallel_size * args.pipeline_model_parallel_size * args.context_parallel_size
    return max(1, int(args.world_size) // max(1, int(model_parallel)))


def run_config(args: Namespace, *, log_dir: str | None = None) -> RunConfig:
    """The RunConfig that describes the run Megatron-LM's `args` will train."""
    micro, null = args.micro_batch_size, args.tokenizer_type == "NullTokenizer"
    return RunConfig.from_dict(
        {
            "model": _model(args),
            "parallel": _parallel(args),
            "ddp": _ddp(args),
            "optimizer": _optimizer(args),
            "training": {
                "micro_batch_size": micro,
                "steps": args.train_iters or 0,
                "seed": args.seed,
                "num_microbatches": max(1, args.global_batch_size // (micro * _data_parallel(args))),
            },
            "tokenizer": {
                "type": "null" if null else "huggingface",
                "vocab_size": args.vocab_size or 1000,
                "path": None if null else args.tokenizer_model,
                "build": False,
            },
            "checkpoint": {"load": args.load, "save": args.save},
            "logging": {"log_dir": log_dir, "tensorboard_dir": args.tensorboard_dir},
            # the rank watch's state deadline: Megatron-LM's own collective timeout
            "startup": {"timeout_s": float(getattr(args, "distributed_timeout_minutes", 10)) * 60},
            "backend": "gloo" if args.distributed_backend == "gloo" else "nccl",
            "plan": "training",
        }
    )


def run_config_from_yaml(
    path: str, *, world_size: int = 1, log_dir: str | None = None, allow_targets: bool = False
) -> RunConfig:
    """The RunConfig of a Megatron-LM YAML config (`PretrainConfigContainer.to_yaml`'s format) for a
    job of `world_size` ranks: its arguments derived and checked by Megatron-LM's `validate_args`.
    The file is read as data first (`_yaml.py`: its size, aliases and `_target_`s checked before
    megatron is imported; `allow_targets` leaves the targets to Megatron-LM's allowlist)."""
    from lifecycle.errors import ConfigError
    from lifecycle.lm_dropin.entry._yaml import load_container

    try:
        container = load_container(path, allow_targets=allow_targets)  # megatron imported once it is checked
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(
            f"--megatron-config {path}: not a Megatron-LM PretrainConfigContainer YAML: {exc}", field="megatron_config"
        ) from exc
    from megatron.training.arguments import validate_args

    from lifecycle.lm_dropin.entry._args_dump import masked_dump

    args = args_from_container(container)
    args.world_size = world_size
    try:
        with masked_dump():  # its dump of the arguments goes to stdout: credentials masked
            validate_args(args)
    except (AssertionError, ValueError) as exc:
        raise ConfigError(
            f"--megatron-config {path}: Megatron-LM's validate_args: {exc}", field="megatron_config"
        ) from exc
    return run_config(args, log_dir=log_dir)


def _activation(args: Namespace, transformer: TransformerConfig | None) -> None:
    """The flags Megatron-LM turns into the transformer's activation (`--swiglu`, `--squared-relu`,
    `--quick-geglu`), set back from the container's transformer config."""
    if not hasattr(transformer, "activation_func"):
        return
    import torch.nn.functional as F
    from megatron.core.activations import squared_relu
    from megatron.core.fusions.fused_bias_geglu import quick_gelu

    func, gated = getattr(transformer, "activation_func", None), bool(getattr(transformer, "gated_linear_unit", False))
    args.swiglu = gated and func is F.silu
    args.squared_relu = not gated and func is squared_relu
    args.quick_geglu = gated and func is quick_gelu


def lost_in_args(container: PretrainConfigContainer, args: Namespace) -> list[Problem]:
    """The transformer fields of `container` that the arguments derived from it do not give back: the
    script's model provider builds the model from the arguments (Megatron-LM's
    `core_transformer_config_from_args`), so a field lost on the way would train another model."""
    transformer = getattr(getattr(container, "model", None), "transformer", None)
    if transformer is None or not is_dataclass(transformer):
        return []
    try:
        from megatron.training.argument_utils import core_transformer_config_from_args
    except ImportError:  # megatron-core < 0.19
        from megatron.training.arguments import core_transformer_config_from_args
    fix = "give pretrain the script's parsed arguments (pretrain_cfg_container_from_args) or set that argument"
    try:
        rebuilt = core_transformer_config_from_args(args, type(transformer))
    except (AssertionError, ValueError, TypeError) as exc:
        message = f"Megatron-LM's core_transformer_config_from_args refuses the arguments derived from it: {exc}"
        return [
            Problem(check="megatron_lm_one_source", field="model.transformer", value=None, message=message, fix=fix)
        ]
    problems = []
    for f in fields(transformer):
        if f.name in FROM_ANOTHER_ARGUMENT:
            continue
        given, back = getattr(transformer, f.name, None), getattr(rebuilt, f.name, None)
        if repr(given) != repr(back):
            message = f"the PretrainConfigContainer says {given!r}; the arguments derived from it give {back!r}"
            problems.append(
                Problem(
                    check="megatron_lm_one_source",
                    field=f"model.transformer.{f.name}",
                    value=None,
                    message=message,
                    fix=fix,
                )
            )
    return problems
