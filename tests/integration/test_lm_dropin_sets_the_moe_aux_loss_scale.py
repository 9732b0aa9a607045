"""Under the drop-in, a MoE model's auxiliary-loss scale is set as Megatron-LM's `initialize_megatron`
sets it, to 1 after the seeds, before the model is built: a forward pass before the first step's
schedule (an evaluation first, a user's own check) scales the auxiliary loss as under Megatron-LM.
One rank in the test process; the run stops in its first forward step."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

from megatron.core.enums import ModelType
from megatron.core.transformer.moe.router import MoEAuxLossAutoScaler
from megatron.training import global_vars
from megatron.training.argument_utils import gpt_config_from_args, pretrain_cfg_container_from_args
from megatron.training.arguments import parse_and_validate_args

from lifecycle.lm_dropin import pretrain
from tests.integration.test_lm_dropin_pretrains_a_tiny_gpt_in_one_process import STEPS, one_rank, script


def test_a_moe_models_aux_loss_scale_is_one_before_the_model_is_built_as_under_megatron_lm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(MoEAuxLossAutoScaler, "main_loss_backward_scale", None)  # as in a fresh process
    seen: list[Any] = []

    def forward_step(*args: Any, **kwargs: Any) -> Any:  # the first step's, before its schedule sets the scale
        seen.append(MoEAuxLossAutoScaler.main_loss_backward_scale)
        raise RuntimeError("stopped in the first forward step: the scale is what startup left")

    with one_rank():
        sys.argv[1:] = [*script.TINY_GPT, *STEPS, "--num-experts", "2"]
        args = parse_and_validate_args()
        container = pretrain_cfg_container_from_args(args, gpt_config_from_args(args))
        global_vars.unset_global_variables()
        with pytest.raises(RuntimeError, match="stopped in the first forward step"):
            pretrain(
                container,
                script.train_valid_test_datasets_provider,
                ModelType.encoder_or_decoder,
                forward_step,
                log_dir=tmp_path,
            )
    assert len(seen) == 1 and seen[0] is not None, "no auxiliary-loss scale before the model was built"
    assert seen[0].tolist() == [1.0]
