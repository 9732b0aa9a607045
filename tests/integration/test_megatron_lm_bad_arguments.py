"""The drop-in `pretrain` called with an argument that cannot be what Megatron-LM's signature takes
is refused at the call, in one line naming the argument and the fix, before any work: no log, no
process group. (Megatron-LM's own `pretrain` fails on these 20-30 s in, with a TypeError from deep
inside, or trains and fails at the first step.) One spawned process, the example script's
arguments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

from lifecycle.launchers.local import run_ranks

ROOT = Path(__file__).resolve().parents[2]


def _bad_calls(log_dir: str) -> dict[str, Any]:
    import sys

    import torch.distributed as dist

    sys.path.insert(0, str(ROOT / "examples"))
    sys.argv = ["pretrain_gpt_tiny.py"]
    import pretrain_gpt_tiny as script
    from megatron.core.enums import ModelType
    from megatron.training.argument_utils import gpt_config_from_args, pretrain_cfg_container_from_args
    from megatron.training.arguments import parse_and_validate_args

    from lifecycle.lm_dropin import pretrain

    sys.argv[1:] = script.TINY_GPT
    args = parse_and_validate_args()
    container = pretrain_cfg_container_from_args(args, gpt_config_from_args(args))
    data, forward = script.train_valid_test_datasets_provider, script.forward_step
    calls = {
        "old_signature": lambda: pretrain(data, None, ModelType.encoder_or_decoder, forward, log_dir=log_dir),
        "forward_step_func": lambda: pretrain(container, data, ModelType.encoder_or_decoder, None, log_dir=log_dir),
        "model_type": lambda: pretrain(container, data, "gpt", forward, log_dir=log_dir),
        "non_loss_data_func": lambda: pretrain(
            container, data, ModelType.encoder_or_decoder, forward, non_loss_data_func=3, log_dir=log_dir
        ),
        "store": lambda: pretrain(container, data, ModelType.encoder_or_decoder, forward, store="host:29500"),
    }
    out: dict[str, Any] = {}
    for label, call in calls.items():
        try:
            call()
            out[label] = None
        except Exception as exc:
            out[label] = {"type": type(exc).__name__, "field": getattr(exc, "field", None), "message": str(exc)}
    out["initialized"] = dist.is_initialized()
    out["logs"] = sorted(p.name for p in Path(log_dir).iterdir()) if Path(log_dir).exists() else []
    return out


@pytest.fixture(scope="module")
def refused(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_ranks(_bad_calls, 1, str(tmp_path_factory.mktemp("bad") / "logs"), timeout_s=300)[0]


@pytest.mark.parametrize(
    ("label", "field"),
    [
        ("old_signature", "cfg_container"),
        ("forward_step_func", "forward_step_func"),
        ("model_type", "model_type"),
        ("non_loss_data_func", "non_loss_data_func"),
        ("store", "store"),
    ],
)
def test_a_bad_argument_is_refused_at_the_call_in_one_line_naming_it(
    refused: dict[str, Any], label: str, field: str
) -> None:
    error = refused[label]
    assert error is not None and error["type"] == "ConfigError" and error["field"] == field, error
    assert error["message"].startswith(f"pretrain: {field}: expected ") and "\n" not in error["message"]


def test_the_taking_of_the_dataset_provider_first_is_named_as_megatron_lms_old_signature(
    refused: dict[str, Any],
) -> None:
    assert "took the dataset provider first" in refused["old_signature"]["message"]


def test_nothing_was_started_for_a_refused_call(refused: dict[str, Any]) -> None:
    assert refused["initialized"] is False
    assert refused["logs"] == []
