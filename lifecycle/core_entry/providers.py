"""Model providers in Megatron's shape, and the TransformerConfig built from a RunConfig.

A provider is called once per virtual-pipeline chunk:

    provider(config, *, pre_process, post_process, vp_stage, inputs) -> MegatronModule

`config` is the megatron `TransformerConfig` the lifecycle built (the *provider config*);
`inputs` is a frozen `ModelInputs` with what the services resolved (padded vocab size, sequence
length). A provider may keep `config` or copy it; bindings target whatever the model holds.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lifecycle.runtime import ModelInputs, ModelProvider

if TYPE_CHECKING:
    from megatron.core.transformer import ModuleSpec, TransformerConfig
    from torch.nn import Module

    from lifecycle.config import RunConfig
    from lifecycle.log import JSONValue


_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def padded_vocab_size(vocab_size: int, divisible_by: int, tp: int) -> int:
    """Megatron's padding: round up to a multiple of `divisible_by * tp`."""
    multiple = divisible_by * tp
    return -(-vocab_size // multiple) * multiple


def model_inputs(run: RunConfig, vocab_size: int | None) -> ModelInputs:
    """The provider inputs for `run`, with the vocabulary the services resolved."""
    model = run.model
    vocab = vocab_size if vocab_size is not None else model.vocab_size
    if vocab is None:
        vocab = run.tokenizer.vocab_size
    return ModelInputs(
        vocab_size=padded_vocab_size(vocab, model.make_vocab_size_divisible_by, run.parallel.tp),
        seq_length=model.seq_length,
        max_position_embeddings=model.max_position_embeddings or model.seq_length,
        transformer_impl=model.transformer_impl,
        share_embeddings_and_output_weights=model.share_embeddings_and_output_weights,
    )


def transformer_config(run: RunConfig, *, cpu: bool | None = None, hybrid: bool = False) -> TransformerConfig:
    """megatron's TransformerConfig for `run` (model, parallel and dtype fields).

    `hybrid`: the config of a HybridModel whose `*-` pattern has `model.num_layers` GPT blocks, so
    `num_layers` counts its symbols (twice `model.num_layers`) and `is_hybrid_model` is set, as the
    migration guide and Megatron-LM's `pretrain_hybrid.py` do (see `_hybrid.py`).
    """
    import torch
    from megatron.core.transformer import TransformerConfig

    from lifecycle.core_entry.compat import mend_model_parallel_config

    mend_model_parallel_config()
    model, par = run.model, run.parallel
    dtype = getattr(torch, _DTYPES[model.dtype])
    on_cpu = (not torch.cuda.is_available()) if cpu is None else cpu
    return TransformerConfig(
        **_model_fields(run, hybrid),
        **par.megatron_sizes(),
        sequence_parallel=par.sequence_parallel,
        tp_comm_overlap=par.tp_comm_overlap,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        bf16=model.dtype == "bf16",
        fp16=model.dtype == "fp16",
        use_cpu_initialization=on_cpu,
        **_NO_FUSIONS,
        **({"is_hybrid_model": True} if hybrid else {}),
    )


_NO_FUSIONS = {
    "gradient_accumulation_fusion": False,
    "bias_dropout_fusion": False,
    "masked_softmax_fusion": False,
    "apply_rope_fusion": False,
    "bias_activation_fusion": False,
    "persist_layer_norm": False,
}
"""The fused kernels are off: they need CUDA (and some Apex/TE), and the CPU rehearsal runs without."""


def _model_fields(run: RunConfig, hybrid: bool) -> dict[str, JSONValue]:
    model = run.model
    return {
        "num_layers": model.num_layers * (2 if hybrid else 1),
        "hidden_size": model.hidden_size,
        "num_attention_heads": model.num_attention_heads,
        "num_query_groups": model.num_query_groups,
        "ffn_hidden_size": model.ffn_hidden_size,
        "init_method_std": model.init_method_std,
        "hidden_dropout": model.hidden_dropout,
        "attention_dropout": model.attention_dropout,
        "num_moe_experts": model.num_moe_experts,
        "add_bias_linear": model.add_bias_linear,
        "normalization": model.normalization,
        "recompute_granularity": model.recompute_granularity,
        "recompute_method": model.recompute_method,
        "recompute_num_layers": model.recompute_num_layers,
        "deterministic_mode": model.deterministic_mode,
        "calculate_per_token_loss": model.calculate_per_token_loss,
    }


def builds_hybrid(provider: ModelProvider) -> bool:
    """Whether `provider` is one of the default providers, which build a HybridModel where
    megatron-core deprecates GPTModel (`compat.gpt_model_deprecated`), else a GPTModel."""
    from lifecycle.core_entry.compat import gpt_model_deprecated

    default = any(provider is p for p in PROVIDERS.values()) or isinstance(provider, GPTBuilder | HybridBuilder)
    return default and gpt_model_deprecated()


def provider_config(run: RunConfig, provider: ModelProvider) -> TransformerConfig:
    """The TransformerConfig the lifecycle gives `provider`: a hybrid one for a default provider
    that builds a HybridModel, the GPT-shaped one (`num_layers` blocks) for every other provider."""
    return transformer_config(run, hybrid=builds_hybrid(provider))


def layer_spec(impl: str) -> ModuleSpec:
    """The local (plain torch) GPT layer spec, or TE's where transformer-engine is installed."""
    if impl == "transformer_engine":
        from megatron.core.models.gpt.gpt_layer_specs import (
            get_gpt_layer_with_transformer_engine_spec,
        )

        return get_gpt_layer_with_transformer_engine_spec()
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    return get_gpt_layer_local_spec()


def _gpt(config: TransformerConfig, pre: bool, post: bool, vp: int | None, inputs: ModelInputs) -> Module:
    """The default providers' model: a HybridModel of `*-` blocks when `config` is a hybrid one
    (`provider_config`), else a GPTModel."""
    if getattr(config, "is_hybrid_model", False):
        from lifecycle.core_entry._hybrid import hybrid_model

        return hybrid_model(config, pre, post, vp, inputs)
    from megatron.core.models.gpt import GPTModel

    return GPTModel(
        config=config,
        transformer_layer_spec=layer_spec(inputs.transformer_impl),
        vocab_size=inputs.vocab_size,
        max_sequence_length=inputs.max_position_embeddings,
        pre_process=pre,
        post_process=post,
        share_embeddings_and_output_weights=inputs.share_embeddings_and_output_weights,
        vp_stage=vp,
    )


def gpt_provider(
    config: TransformerConfig, *, pre_process: bool, post_process: bool, vp_stage: int | None, inputs: ModelInputs
) -> Module:
    """A tiny GPT (a HybridModel of `*-` blocks on megatron-core 0.19, a GPTModel before) that keeps
    the provider's config: `model.config is config`."""
    return _gpt(config, pre_process, post_process, vp_stage, inputs)


def copying_provider(
    config: TransformerConfig, *, pre_process: bool, post_process: bool, vp_stage: int | None, inputs: ModelInputs
) -> Module:
    """Deep-copies its config into the model, as canonical Nemotron Omni does.

    Callbacks bound to `config` would never reach the scheduler, which reads `model.config`.
    """
    language_cfg = copy.deepcopy(config)
    return _gpt(language_cfg, pre_process, post_process, vp_stage, inputs)


@dataclass(slots=True, kw_only=True)
class GPTModelSpec:
    """A builder's model config: the transformer config nested, plus model-level fields."""

    transformer: TransformerConfig
    vocab_size: int
    seq_length: int


@dataclass(slots=True, kw_only=True)
class HybridModelSpec:
    """A hybrid (Mamba-style) builder's model config with its own nested transformer config."""

    transformer: TransformerConfig
    hybrid_override_pattern: str
    vocab_size: int
    seq_length: int


class GPTBuilder:
    """Builder variant (Megatron-Bridge's GPTModelBuilder shape): the model's config is the
    nested `spec.transformer`, which here is the very config the lifecycle passed."""

    def __init__(self) -> None:
        self.spec: GPTModelSpec | None = None

    def __call__(
        self,
        config: TransformerConfig,
        *,
        pre_process: bool,
        post_process: bool,
        vp_stage: int | None,
        inputs: ModelInputs,
    ) -> Module:
        if self.spec is None or self.spec.transformer is not config:
            self.spec = GPTModelSpec(transformer=config, vocab_size=inputs.vocab_size, seq_length=inputs.seq_length)
        return _gpt(self.spec.transformer, pre_process, post_process, vp_stage, inputs)


class HybridBuilder:
    """Hybrid (Mamba-style) builder: derives its own nested transformer config from the one it
    is given, and the model stores that nested object, so `model.config is not config`.

    Mamba layers (`M` in `pattern`) need the mamba_ssm CUDA kernels and cannot run on CPU; the model
    built here is the default providers' GPT (HybridModel `*-` blocks on 0.19, GPTModel before) on
    the nested config, and `pattern` is recorded only. What binding cares about, where the config
    the scheduler reads lives, is the hybrid builder's.
    """

    def __init__(self, pattern: str = "M*") -> None:
        self.pattern = pattern
        self.spec: HybridModelSpec | None = None
        self._source: TransformerConfig | None = None

    def __call__(
        self,
        config: TransformerConfig,
        *,
        pre_process: bool,
        post_process: bool,
        vp_stage: int | None,
        inputs: ModelInputs,
    ) -> Module:
        if self.spec is None or self._source is not config:
            self._source = config
            self.spec = HybridModelSpec(
                transformer=dataclasses.replace(config),
                hybrid_override_pattern=self.pattern,
                vocab_size=inputs.vocab_size,
                seq_length=inputs.seq_length,
            )
        return _gpt(self.spec.transformer, pre_process, post_process, vp_stage, inputs)


PROVIDERS: dict[str, ModelProvider] = {
    "gpt": gpt_provider,
    "copying": copying_provider,
}
"""Stateless providers by name; builders are classes (`GPTBuilder()`, `HybridBuilder()`)."""
