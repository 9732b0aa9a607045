"""One source of truth (`lifecycle.lm_dropin.entry`): the RunConfig the startup log records is
derived from Megatron-LM's arguments field by field; a container that says something else than the
arguments about the model is reported; arguments derived from a YAML container take its values.
Megatron's parser and `validate_args` are stood in for (tests/fake_megatron.py)."""

from __future__ import annotations

import ast
import subprocess
import sys
from argparse import Namespace
from dataclasses import dataclass
from pathlib import Path

import pytest

from lifecycle.errors import ConfigError
from lifecycle.lm_dropin.entry import args_from_container
from lifecycle.testing import disagreements, run_config, run_config_from_yaml
from tests import fake_megatron
from tests.fake_megatron import ARGS, section

# Megatron-LM's arguments after validate_args, every one different from its default.
VALIDATED = {
    **ARGS,
    "num_layers": 3,
    "hidden_size": 96,
    "num_attention_heads": 6,
    "num_query_groups": 2,
    "group_query_attention": True,
    "ffn_hidden_size": 384,
    "seq_length": 256,
    "max_position_embeddings": 512,
    "vocab_size": 1000,
    "padded_vocab_size": 1024,
    "make_vocab_size_divisible_by": 64,
    "bf16": True,
    "transformer_impl": "local",
    "init_method_std": 0.006,
    "hidden_dropout": 0.05,
    "attention_dropout": 0.02,
    "num_experts": 4,
    "add_bias_linear": False,
    "untie_embeddings_and_output_weights": True,
    "tensor_model_parallel_size": 2,
    "pipeline_model_parallel_size": 2,
    "context_parallel_size": 2,
    "expert_model_parallel_size": 2,
    "expert_tensor_parallel_size": 1,
    "virtual_pipeline_model_parallel_size": 2,
    "sequence_parallel": True,
    "tp_comm_overlap": True,
    "overlap_grad_reduce": True,
    "overlap_param_gather": True,
    "align_grad_reduce": False,
    "align_param_gather": True,
    "use_distributed_optimizer": True,
    "accumulate_allreduce_grads_in_fp32": True,
    "ddp_average_in_collective": True,
    "ddp_bucket_size": 40_000_000,
    "optimizer": "sgd",
    "lr": 3e-4,
    "min_lr": 3e-5,
    "weight_decay": 0.1,
    "adam_beta1": 0.8,
    "adam_beta2": 0.95,
    "adam_eps": 1e-6,
    "clip_grad": 0.5,
    "loss_scale": 1024.0,
    "micro_batch_size": 2,
    "global_batch_size": 16,
    "train_iters": 20,
    "seed": 7,
    "tokenizer_type": "HuggingFaceTokenizer",
    "tokenizer_model": "/models/tok",
    "load": "/ckpt/in",
    "save": "/ckpt/out",
    "tensorboard_dir": "/tb",
    "distributed_timeout_minutes": 3,
    "distributed_backend": "gloo",
    "world_size": 16,
    "data_parallel_size": 2,
}


def args(**changes: object) -> Namespace:
    return Namespace(**{**VALIDATED, **changes})


def test_every_argument_lands_in_the_field_the_log_records() -> None:
    derived = run_config(args(), log_dir="/logs").to_dict()
    model = {k: derived["model"][k] for k in VALIDATED_MODEL}
    assert model == VALIDATED_MODEL
    assert derived["parallel"] | {"world_size": None, "rank": None} == {
        "tp": 2, "pp": 2, "cp": 2, "ep": 2, "etp": 1, "vpp": 2, "world_size": None, "rank": None,
        "sequence_parallel": True, "tp_comm_overlap": True,
    }  # fmt: skip
    assert derived["ddp"] == {
        "overlap_grad_reduce": True, "overlap_param_gather": True, "align_grad_reduce": False,
        "align_param_gather": True, "use_distributed_optimizer": True, "grad_reduce_in_fp32": True,
        "average_in_collective": True, "bucket_size": 40_000_000,
    }  # fmt: skip
    assert derived["optimizer"] == {
        "optimizer": "sgd", "lr": 3e-4, "min_lr": 3e-5, "weight_decay": 0.1, "adam_beta1": 0.8,
        "adam_beta2": 0.95, "adam_eps": 1e-6, "clip_grad": 0.5, "loss_scale": 1024.0,
    }  # fmt: skip
    assert derived["training"] == {"micro_batch_size": 2, "num_microbatches": 4, "steps": 20, "seed": 7}
    assert derived["tokenizer"] == {"type": "huggingface", "path": "/models/tok", "vocab_size": 1000, "build": False}
    assert (derived["checkpoint"]["load"], derived["checkpoint"]["save"]) == ("/ckpt/in", "/ckpt/out")
    assert (derived["logging"]["log_dir"], derived["logging"]["tensorboard_dir"]) == ("/logs", "/tb")
    assert derived["startup"] == {"timeout_s": 180.0}
    assert (derived["backend"], derived["plan"]) == ("gloo", "training")


VALIDATED_MODEL = {
    "num_layers": 3, "hidden_size": 96, "num_attention_heads": 6, "num_query_groups": 2, "ffn_hidden_size": 384,
    "seq_length": 256, "max_position_embeddings": 512, "vocab_size": 1024, "make_vocab_size_divisible_by": 64,
    "dtype": "bf16", "transformer_impl": "local", "init_method_std": 0.006, "hidden_dropout": 0.05,
    "attention_dropout": 0.02, "num_moe_experts": 4, "add_bias_linear": False,
    "share_embeddings_and_output_weights": False,
}  # fmt: skip


def test_the_defaults_megatron_leaves_are_read_as_the_lifecycle_names_them() -> None:
    plain = Namespace(**{**ARGS, "lr": 1e-3, "micro_batch_size": 1, "global_batch_size": 1, "world_size": 1})
    plain.tokenizer_type, plain.vocab_size, plain.max_position_embeddings = "NullTokenizer", None, 128
    plain.num_query_groups = 2
    for unset in ("distributed_timeout_minutes", "group_query_attention", "bf16", "fp16"):
        delattr(plain, unset)
    derived = run_config(plain).to_dict()
    assert derived["model"]["num_query_groups"] is None  # no group-query attention
    assert derived["model"]["vocab_size"] is None
    assert (derived["model"]["dtype"], derived["model"]["transformer_impl"]) == ("fp32", "transformer_engine")
    assert derived["model"]["share_embeddings_and_output_weights"] is True
    assert derived["parallel"]["vpp"] is None  # set by validate_args only
    assert derived["tokenizer"] == {"type": "null", "path": None, "vocab_size": 1000, "build": False}
    assert derived["training"]["steps"] == 0  # train_iters unset
    assert derived["startup"] == {"timeout_s": 600.0}  # Megatron-LM's default 10 minutes
    assert (derived["optimizer"]["optimizer"], derived["backend"]) == ("adam", "nccl")


@pytest.mark.parametrize(
    ("changes", "dtype"),
    [({"bf16": True, "fp16": True}, "bf16"), ({"bf16": False, "fp16": True}, "fp16"), ({"bf16": False}, "fp32")],
)
def test_the_dtype_is_read_from_megatrons_flags(changes: dict[str, object], dtype: str) -> None:
    assert run_config(args(**changes)).model.dtype == dtype


def test_names_megatron_has_more_of_are_read_as_the_lifecycle_has_them() -> None:
    other = run_config(args(transformer_impl="inference_optimized", optimizer="muon", distributed_backend="ucc"))
    assert (other.model.transformer_impl, other.optimizer.optimizer, other.backend) == (
        "transformer_engine",
        "adam",
        "nccl",
    )
    assert run_config(args(padded_vocab_size=None)).model.vocab_size == 1000


NO_MODEL_PARALLELISM = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "context_parallel_size": 1}


@pytest.mark.parametrize(
    ("changes", "microbatches"),
    [
        ({}, 4),  # 16 // (2 * 2)
        ({"data_parallel_size": None}, 4),  # before validate_args: 16 ranks // (2 * 2 * 2)
        ({"data_parallel_size": 0, "context_parallel_size": 1, "world_size": 8}, 4),
        ({"data_parallel_size": None, "pipeline_model_parallel_size": 1, "world_size": 8}, 4),
        ({"data_parallel_size": None, "world_size": 4}, 8),  # fewer ranks than one model: one replica
        ({**NO_MODEL_PARALLELISM, "data_parallel_size": None, "world_size": 4}, 2),  # a replica per rank
        ({"data_parallel_size": 8}, 1),
        ({"data_parallel_size": 8, "global_batch_size": 8}, 1),  # fewer samples than one round: one microbatch
        # a size of 0 (refused when the config is validated) is no division by zero here
        ({"data_parallel_size": None, "tensor_model_parallel_size": 0, "global_batch_size": 64}, 2),
        ({"data_parallel_size": 1, "global_batch_size": 6}, 3),
    ],
)
def test_microbatches_follow_from_the_batch_sizes_and_the_data_parallel_ranks(
    changes: dict[str, object], microbatches: int
) -> None:
    assert run_config(args(**changes)).training.num_microbatches == microbatches


def test_the_options_of_the_derivations_are_named(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        run_config(args(), "/logs")  # type: ignore[misc]
    with pytest.raises(TypeError):
        run_config_from_yaml(str(tmp_path / "megatron.yaml"), 4)  # type: ignore[misc]


def container(**sections: dict[str, object]) -> object:
    return section("PretrainConfigContainer", sections)


def test_a_container_that_says_another_model_than_the_args_is_reported_field_by_field() -> None:
    edited = container(
        model={"num_layers": 4, "seq_length": 256, "transformer": {"hidden_size": 128}},
        train={"micro_batch_size": 2, "global_batch_size": 32},
    )
    problems = disagreements(edited, args())  # type: ignore[arg-type]
    assert [(p.check, p.field, p.value) for p in problems] == [
        ("megatron_lm_one_source", "model.num_layers", 4),
        ("megatron_lm_one_source", "model.transformer.hidden_size", 128),
        ("megatron_lm_one_source", "train.global_batch_size", 32),
    ]
    assert problems[0].message == "the PretrainConfigContainer says 4, Megatron-LM's args say 3 (num_layers)"
    assert problems[0].fix == (
        "build the container from the args (pretrain_cfg_container_from_args) or edit one of them only"
    )


def test_what_only_one_side_says_is_no_disagreement() -> None:
    one_side = container(
        model={"num_layers": None, "hidden_size": 96},  # unset in the container
        train={"train_iters": 20, "not_a_check": 1},  # agreeing
        optimizer={"lr": 0.5},
    )
    without_lr = args()
    del without_lr.lr  # not among the args
    assert disagreements(one_side, without_lr) == []  # type: ignore[arg-type]
    assert disagreements(container(), args()) == []  # type: ignore[arg-type]
    assert [p.field for p in disagreements(one_side, args())] == ["optimizer.lr"]  # type: ignore[arg-type]


def test_sections_that_are_no_dataclass_or_fields_that_cannot_be_read_are_passed_over() -> None:
    @dataclass
    class Train:
        train_iters: int = 5
        seed: int = 1

    odd = container(model={"transformer": {"num_layers": 9}}, rng={"seed": 2})
    odd.model = {"num_layers": 9}  # type: ignore[attr-defined]
    odd.train = Train()  # type: ignore[attr-defined]
    Train.train_iters = property(lambda self: 1 // 0)  # type: ignore[assignment]  # reading it raises
    # train's seed is met before rng's: the first section naming an argument speaks for it
    assert [(p.field, p.value) for p in disagreements(odd, args())] == [("train.seed", 1)]  # type: ignore[arg-type]


@pytest.fixture
def megatron(monkeypatch: pytest.MonkeyPatch) -> fake_megatron.Recorded:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    return fake_megatron.install(monkeypatch)


def test_args_from_a_container_take_its_values_over_megatrons_defaults(
    megatron: fake_megatron.Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = container(
        model={"num_layers": 6, "seq_length": 64, "transformer": {"hidden_size": 32, "not_an_argument": 1}},
        ddp={"bucket_size": 1000, "average_in_collective": True, "grad_reduce_in_fp32": True},
        optimizer={"lr": 0.5, "start_weight_decay": 0.3, "end_weight_decay": 0.2},
    )
    derived = args_from_container(built)  # type: ignore[arg-type]
    assert (derived.num_layers, derived.hidden_size, derived.seq_length, derived.lr) == (6, 32, 64, 0.5)
    assert (derived.ddp_bucket_size, derived.ddp_average_in_collective) == (1000, True)
    assert derived.accumulate_allreduce_grads_in_fp32 is True
    assert (derived.start_weight_decay, derived.end_weight_decay) == (None, None)  # validate_args derives them
    assert derived.max_position_embeddings == 64  # the container's GPT config has only seq_length
    assert not hasattr(derived, "not_an_argument") and not hasattr(derived, "bucket_size")
    assert derived._is_global_batch_size_explicitly_specified is True
    assert (derived.rank, derived.world_size, derived.num_attention_heads) == (0, 1, 4)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    placed = args_from_container(container(model={"max_position_embeddings": 512, "seq_length": 64}))  # type: ignore[arg-type]
    assert (placed.rank, placed.world_size, placed.max_position_embeddings) == (3, 8, 512)


YAML = (
    "_target_: megatron.configs.Config\n"
    "model:\n  num_layers: 4\n  seq_length: 64\n  tensor_model_parallel_size: 2\n"
    "  transformer: {hidden_size: 32, num_attention_heads: 2}\n"
    "train: {micro_batch_size: 1, global_batch_size: 8, train_iters: 3}\n"
    "optimizer: {lr: 0.01, start_weight_decay: 0.1}\n"
    "ddp: {bucket_size: 1000}\n"
    "tokenizer: {tokenizer_type: NullTokenizer, vocab_size: 512}\n"
)


def test_a_yaml_config_gives_the_run_config_of_its_validated_args(
    tmp_path: Path, megatron: fake_megatron.Recorded
) -> None:
    path = tmp_path / "megatron.yaml"
    path.write_text(YAML)
    config = run_config_from_yaml(str(path), world_size=4, log_dir="/logs")
    assert (config.model.num_layers, config.model.hidden_size, config.model.max_position_embeddings) == (4, 32, 64)
    assert (config.parallel.tp, config.ddp.bucket_size, config.optimizer.lr) == (2, 1000, 0.01)
    assert (config.training.steps, config.training.num_microbatches) == (3, 4)  # 8 // (1 * 4 ranks // 2)
    assert (config.tokenizer.type, config.tokenizer.vocab_size, config.logging.log_dir) == ("null", 512, "/logs")
    assert [a.world_size for a in megatron.validated] == [4]
    single = tmp_path / "single.yaml"
    single.write_text(YAML.replace("  tensor_model_parallel_size: 2\n", ""))
    one = run_config_from_yaml(str(single))  # one rank unless told
    assert (megatron.validated[-1].world_size, one.training.num_microbatches) == (1, 8)


def test_what_megatron_refuses_of_a_yaml_config_is_one_line_naming_the_file(
    tmp_path: Path, megatron: fake_megatron.Recorded
) -> None:
    path = tmp_path / "megatron.yaml"
    path.write_text(YAML)
    with pytest.raises(ConfigError) as caught:
        run_config_from_yaml(str(path), world_size=3)
    assert str(caught.value) == (
        f"--megatron-config {path}: Megatron-LM's validate_args: world size (3) is not divisible by 2"
    )
    assert caught.value.field == "megatron_config"
    short = tmp_path / "short.yaml"
    short.write_text(YAML.replace("seq_length: 64", "seq_length: 64\n  max_position_embeddings: 32"))
    with pytest.raises(ConfigError) as caught:
        run_config_from_yaml(str(short), world_size=2)
    assert str(caught.value) == (
        f"--megatron-config {short}: Megatron-LM's validate_args: seq_length (64) exceeds max_position_embeddings (32)"
    )
    megatron.refuse = TypeError("PretrainConfigContainer.__init__() got an unexpected keyword argument 'x'")
    with pytest.raises(ConfigError) as caught:
        run_config_from_yaml(str(path))
    assert str(caught.value) == (
        f"--megatron-config {path}: not a Megatron-LM PretrainConfigContainer YAML: "
        "PretrainConfigContainer.__init__() got an unexpected keyword argument 'x'"
    )
    assert caught.value.field == "megatron_config"


def test_importing_the_entry_loads_neither_torch_nor_megatron() -> None:
    """`--megatron-config` checks the file before megatron is imported: the module deriving the
    RunConfig names megatron's container in annotations only."""
    code = "import sys, lifecycle.lm_dropin.entry; print(sorted({m.split('.')[0] for m in sys.modules}))"
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert {"torch", "megatron"} & set(ast.literal_eval(out.stdout.strip())) == set()
