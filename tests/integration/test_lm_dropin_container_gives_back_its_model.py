"""A `PretrainConfigContainer` given to the drop-in without parsed arguments (built from YAML or a
dict): the arguments it derives for Megatron-LM (whose model provider builds the model from them)
give back every field of the container's transformer config, MoE, SwiGLU and the negated flags
included; a field no argument can say is refused at VALIDATED, naming it, never trained as
another model. Real megatron-core, one process, no rank launched."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

import torch
from megatron.core.enums import ModelType
from megatron.training import global_vars
from megatron.training.argument_utils import gpt_config_from_args, pretrain_cfg_container_from_args
from megatron.training.arguments import parse_and_validate_args, validate_args

from lifecycle.errors import ConfigError
from lifecycle.lm_dropin import pretrain
from lifecycle.lm_dropin.entry import args_from_container
from lifecycle.testing import lost_in_args
from tests.integration.test_lm_dropin_pretrains_a_tiny_gpt_in_one_process import STEPS, one_rank, script


def _container(flags: list[str]) -> Any:
    """The script's container for `flags`, built from parsed arguments, then the arguments dropped."""
    sys.argv[1:] = [*script.TINY_GPT, *STEPS, *flags]
    args = parse_and_validate_args()
    container = pretrain_cfg_container_from_args(args, gpt_config_from_args(args))
    global_vars.unset_global_variables()
    return container


@pytest.mark.parametrize(
    "flags",
    [
        ["--num-experts", "2"],
        ["--swiglu", "--untie-embeddings-and-output-weights"],
        ["--squared-relu", "--no-persist-layer-norm", "--normalization", "RMSNorm"],
        ["--num-experts", "4", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "32"],
    ],
    ids=["moe", "swiglu", "squared-relu-rmsnorm", "moe-topk2"],
)
def test_the_arguments_derived_from_a_container_give_back_its_transformer_config(flags: list[str]) -> None:
    with one_rank():
        container = _container(flags)
        derived = args_from_container(container)
        validate_args(derived)
        lost = lost_in_args(container, derived)
        global_vars.unset_global_variables()
    assert lost == [], [(p.field, p.message) for p in lost]


def test_a_transformer_field_no_argument_can_say_is_refused_at_validated_naming_it(tmp_path: Path) -> None:
    with one_rank():
        container = _container([])
        container.model.transformer = dataclasses.replace(container.model.transformer, activation_func=torch.tanh)
        with pytest.raises(ConfigError) as refused:
            pretrain(
                container,
                script.train_valid_test_datasets_provider,
                ModelType.encoder_or_decoder,
                script.forward_step,
                log_dir=tmp_path,
            )
    line = str(refused.value)
    assert "model.transformer.activation_func" in line and "tanh" in line, line
    assert "pretrain_cfg_container_from_args" in line, "the fix is named"
