"""megatron-core's HybridModel as a GPT: each GPT block is the pattern `*-` (attention, then MLP).

megatron-core 0.19 deprecates GPTModel for HybridModel. Its migration guide
(Megatron-LM `docs/user-guide/hybrid-model-migration.md`) maps one GPT transformer block onto two
hybrid layers, `*` (self-attention) then `-` (dense MLP), sets the config's `num_layers` to the
number of pattern symbols, and writes `|` between pipeline (and virtual-pipeline) segments.

The guide's stack spec, `hybrid_layer_specs.hybrid_stack_spec`, is Transformer Engine's, and for a
"local or otherwise non-TE layout" it asks for "a compatible custom Hybrid stack". That is
`local_stack_spec()`: the layers of megatron's local GPT layer spec (plain torch norms, megatron's
own linear layers and core attention) split into an attention layer and an MLP layer. One more
piece needs TE whatever the spec says: `HybridStack` builds its final norm as `TENorm`, which
raises ImportError "Transformer Engine is not installed" without it. `local_final_norm_stack()`
builds the stack without that norm and adds the local spec's norm under the same name,
`final_norm`. The layers keep the local GPT layer's checkpoint names for their norms, so a
checkpoint's keys are a GPTModel's, layer for layer.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from megatron.core.models.hybrid.hybrid_block import HybridStackSubmodules
    from megatron.core.models.hybrid.hybrid_model import HybridModel
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.transformer_layer import TransformerLayerSubmodules

    from lifecycle.runtime import ModelInputs

GPT_BLOCK = "*-"
"""One GPT transformer block as hybrid layers: self-attention, then a dense MLP."""


@functools.cache
def local_final_norm_stack() -> type:
    """A HybridStack subclass whose final norm is `final_norm` (a norm spec), not TE's `TENorm`.
    (A class made on first use: megatron is imported inside functions.)"""
    from megatron.core.models.hybrid.hybrid_block import HybridStack
    from megatron.core.transformer.spec_utils import build_module

    class LocalFinalNormStack(HybridStack):  # type: ignore[misc]
        def __init__(
            self,
            config: TransformerConfig,
            submodules: HybridStackSubmodules,
            *,
            final_norm: ModuleSpec | type,
            post_process: bool = True,
            post_layer_norm: bool = True,
            **kwargs: object,
        ) -> None:
            super().__init__(config, submodules, post_process=post_process, post_layer_norm=False, **kwargs)
            self.post_layer_norm = post_layer_norm
            if post_process and post_layer_norm:
                self.final_norm = build_module(
                    final_norm,
                    config=config,
                    hidden_size=config.hidden_size,
                    eps=config.layernorm_epsilon,
                )

    return LocalFinalNormStack


def _keys(gpt: TransformerLayerSubmodules, prefix: str) -> dict[str, str]:
    """The local GPT layer's checkpoint names for its norm `prefix` (stored where TE's fused layers
    keep them, `self_attention.linear_qkv.layer_norm_*`, `mlp.linear_fc1.layer_norm_*`), so the
    hybrid layers store them as a GPTModel does (`_interop` loads a GPTModel checkpoint)."""
    return {k: v for k, v in gpt.sharded_state_dict_keys_map.items() if k == prefix}


def local_stack_spec() -> ModuleSpec:
    """The hybrid stack spec of megatron's local GPT layer spec: `*` and `-` layers, local norms."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.hybrid.hybrid_block import HybridStackSubmodules
    from megatron.core.ssm.mlp_layer import MLPLayer
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.transformer_layer import TransformerLayer, TransformerLayerSubmodules

    gpt = get_gpt_layer_local_spec().submodules
    attention = ModuleSpec(
        module=TransformerLayer,
        submodules=TransformerLayerSubmodules(
            input_layernorm=gpt.input_layernorm,
            self_attention=gpt.self_attention,
            self_attn_bda=gpt.self_attn_bda,
            sharded_state_dict_keys_map=_keys(gpt, "input_layernorm."),
        ),
    )
    mlp = ModuleSpec(
        module=MLPLayer,
        submodules=TransformerLayerSubmodules(
            pre_mlp_layernorm=gpt.pre_mlp_layernorm,
            mlp=gpt.mlp,
            mlp_bda=gpt.mlp_bda,
            sharded_state_dict_keys_map=_keys(gpt, "pre_mlp_layernorm."),
        ),
    )
    return ModuleSpec(
        module=local_final_norm_stack(),
        params={"final_norm": gpt.input_layernorm},
        submodules=HybridStackSubmodules(attention_layer=attention, mlp_layer=mlp),
    )


def te_stack_spec() -> ModuleSpec:
    """The guide's own stack spec (Transformer Engine modules)."""
    from megatron.core.models.hybrid.hybrid_layer_specs import hybrid_stack_spec

    return hybrid_stack_spec


def layer_pattern(config: TransformerConfig) -> str:
    """The `*-` pattern of a hybrid config (`num_layers` counts symbols), one `|`-separated segment
    per pipeline stage and virtual stage, as HybridModel splits a pipeline by its pattern."""
    blocks = config.num_layers // len(GPT_BLOCK)
    pp = config.pipeline_model_parallel_size
    segments = pp * (config.virtual_pipeline_model_parallel_size or 1) if pp > 1 else 1
    return "|".join([GPT_BLOCK * (blocks // segments)] * segments)


def hybrid_model(config: TransformerConfig, pre: bool, post: bool, vp: int | None, inputs: ModelInputs) -> HybridModel:
    """A HybridModel with the GPTModel's embeddings (learned absolute positions) on `config`."""
    from megatron.core.models.hybrid.hybrid_model import HybridModel

    local = inputs.transformer_impl != "transformer_engine"
    return HybridModel(
        config=config,
        hybrid_stack_spec=local_stack_spec() if local else te_stack_spec(),
        vocab_size=inputs.vocab_size,
        max_sequence_length=inputs.max_position_embeddings,
        hybrid_layer_pattern=layer_pattern(config),
        pre_process=pre,
        post_process=post,
        share_embeddings_and_output_weights=inputs.share_embeddings_and_output_weights,
        position_embedding_type="learned_absolute",
        vp_stage=vp,
    )
