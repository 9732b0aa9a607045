"""The drop-in's `pretrain` called with an argument Megatron-LM's signature cannot take is refused at
the call, in one line naming the first such argument, what it got (a type, never a repr) and the
fix, before any work: no log directory, no process group. In one process, with megatron's real
PretrainConfigContainer, ModelType and a torch Store (the example script's run of the same is
tests/integration/test_megatron_lm_bad_arguments.py, a spawned process)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

import torch.distributed as dist
from megatron.core.enums import ModelType
from megatron.core.optimizer import OptimizerConfig
from megatron.core.transformer import TransformerConfig
from megatron.training.config.container import PretrainConfigContainer
from megatron.training.config.training_config import CheckpointConfig, LoggerConfig, SchedulerConfig, TrainingConfig
from megatron.training.models import GPTModelConfig

from lifecycle.errors import ConfigError
from lifecycle.lm_dropin import pretrain
from lifecycle.testing import refuse_bad_arguments


def datasets(train_val_test_num_samples: list[int]) -> tuple[None, None, None]:
    return None, None, None


def forward_step(data_iterator: object, model: object) -> None: ...


@pytest.fixture(scope="module")
def container() -> PretrainConfigContainer:
    model = GPTModelConfig(transformer=TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=2))
    return PretrainConfigContainer(
        train=TrainingConfig(),
        model=model,
        optimizer=OptimizerConfig(),
        scheduler=SchedulerConfig(),
        logger=LoggerConfig(),
        checkpoint=CheckpointConfig(),
    )


def arguments(container: PretrainConfigContainer, **changed: Any) -> dict[str, Any]:
    """`pretrain`'s arguments as its body sees them: a good call, with `changed`."""
    good = {
        "cfg_container": container,
        "train_valid_test_dataset_provider": datasets,
        "model_type": ModelType.encoder_or_decoder,
        "forward_step_func": forward_step,
        "model_provider": None,
        "process_non_loss_data_func": None,
        "get_embedding_ranks": None,
        "get_position_embedding_ranks": None,
        "non_loss_data_func": None,
        "store": None,
        "inprocess_call_wrapper": None,
        "p2p_communicator": None,
        "pg_collection": None,
        "skip_model_parallel_init": False,
        "log_dir": None,
        "tripwires": "raise",
        "options": None,
    }
    return {**good, **changed}


def refusal(container: PretrainConfigContainer, **changed: Any) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        refuse_bad_arguments(arguments(container, **changed))
    assert "\n" not in str(caught.value) and caught.value.problems == [str(caught.value)]
    return caught.value


def test_a_good_call_is_not_refused(container: PretrainConfigContainer, tmp_path: Path) -> None:
    refuse_bad_arguments(arguments(container))
    every_function = dict.fromkeys(
        ["process_non_loss_data_func", "get_embedding_ranks", "get_position_embedding_ranks", "non_loss_data_func"],
        forward_step,
    )
    refuse_bad_arguments(arguments(container, **every_function, skip_model_parallel_init=True, log_dir=tmp_path))
    refuse_bad_arguments(arguments(container, store=dist.HashStore(), log_dir=str(tmp_path)))


def test_megatron_lms_old_signature_is_named_as_such(container: PretrainConfigContainer) -> None:
    error = refusal(container, cfg_container=datasets, train_valid_test_dataset_provider=None)
    assert error.field == "cfg_container"
    assert str(error) == (
        "pretrain: cfg_container: expected a megatron.training PretrainConfigContainer, got function datasets "
        "(Megatron-LM before 0.17 took the dataset provider first); build it with "
        "pretrain_cfg_container_from_args(args, ...) and pass it first"
    )


def test_a_container_that_is_not_one_is_refused_by_its_type(container: PretrainConfigContainer) -> None:
    error = refusal(container, cfg_container={"train": {}})
    assert str(error) == (
        "pretrain: cfg_container: expected a megatron.training PretrainConfigContainer, got dict; build it with "
        "pretrain_cfg_container_from_args(args, ...) and pass it first"
    )


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("train_valid_test_dataset_provider", None, "expected a function, got NoneType; pass a function"),
        ("forward_step_func", "forward", "expected a function, got str; pass a function"),
        ("process_non_loss_data_func", 3, "expected a function, got int; pass a function or None"),
        ("get_embedding_ranks", [0], "expected a function, got list; pass a function or None"),
        ("get_position_embedding_ranks", (0,), "expected a function, got tuple; pass a function or None"),
        ("non_loss_data_func", 3.5, "expected a function, got float; pass a function or None"),
        ("model_type", "gpt", "expected a megatron.core.enums.ModelType, got str; pass ModelType.encoder_or_decoder"),
        ("store", "host:29500", "expected a torch.distributed.Store, got str; pass a Store or None"),
        ("skip_model_parallel_init", 1, "expected True or False, got int; pass a bool"),
        ("log_dir", 3, "expected a path, got int; pass a str or pathlib.Path, or None"),
    ],
)
def test_a_bad_argument_is_refused_in_one_line_naming_it_and_the_fix(
    container: PretrainConfigContainer, field: str, value: object, message: str
) -> None:
    error = refusal(container, **{field: value})
    assert (error.field, str(error)) == (field, f"pretrain: {field}: {message}")


def test_a_class_passed_for_a_value_is_named_by_its_name(container: PretrainConfigContainer) -> None:
    assert str(refusal(container, model_type=ModelType)) == (
        f"pretrain: model_type: expected a megatron.core.enums.ModelType, got {type(ModelType).__name__} ModelType; "
        "pass ModelType.encoder_or_decoder"
    )


def test_each_bad_argument_is_named_in_turn_one_per_call(container: PretrainConfigContainer) -> None:
    bad: dict[str, object] = {
        "log_dir": 3,
        "skip_model_parallel_init": None,
        "store": "s",
        "model_type": None,
        "forward_step_func": None,
        "train_valid_test_dataset_provider": None,
        "cfg_container": None,
    }
    named = []
    while bad:
        named.append(refusal(container, **bad).field)
        bad.pop(named[-1])
    assert named == [
        "cfg_container",
        "train_valid_test_dataset_provider",
        "forward_step_func",  # the functions, then the values
        "model_type",
        "store",
        "skip_model_parallel_init",
        "log_dir",
    ]


def test_pretrain_refuses_before_any_work(container: PretrainConfigContainer, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    with pytest.raises(ConfigError, match=r"^pretrain: forward_step_func: expected a function, got NoneType"):
        pretrain(container, datasets, ModelType.encoder_or_decoder, None, log_dir=logs)
    assert not logs.exists() and not dist.is_initialized()
