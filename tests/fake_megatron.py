"""Stand-ins for the few megatron modules `lifecycle.lm_dropin.entry` imports lazily, so that the
Megatron-LM YAML loader and the RunConfig derivation run in tests/unit without torch or megatron.

`install(monkeypatch)` puts them in `sys.modules` (monkeypatch takes them out again before the unit
layer's check that nothing loaded megatron) and returns what they recorded:

- `megatron.training.config.PretrainConfigContainer.from_dict(plain, mode)` keeps `plain` and `mode`
  and gives a container whose sections are dataclasses holding the YAML's fields (`section`), or
  raises `Recorded.refuse`;
- `megatron.training.arguments.add_megatron_arguments` adds `ARGS` as the parser's defaults, and
  `validate_args` checks what Megatron-LM's does of it (the parallel sizes divide the world, the
  sequence fits the positions, the weight decays it derives are unset) and sets `data_parallel_size`;
- `megatron.configs` holds one of each kind of `_target_` the loader tells apart.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import sys
import types
from dataclasses import dataclass, field

import pytest

# Every argument `run_config` reads, as Megatron-LM's parser defaults them (a small GPT).
ARGS: dict[str, object] = {
    "num_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_query_groups": 1,
    "group_query_attention": False,
    "ffn_hidden_size": 256,
    "seq_length": 128,
    "max_position_embeddings": None,
    "vocab_size": None,
    "make_vocab_size_divisible_by": 128,
    "bf16": False,
    "fp16": False,
    "transformer_impl": "transformer_engine",
    "init_method_std": 0.02,
    "hidden_dropout": 0.1,
    "attention_dropout": 0.1,
    "num_experts": None,
    "add_bias_linear": True,
    "untie_embeddings_and_output_weights": False,
    "tensor_model_parallel_size": 1,
    "pipeline_model_parallel_size": 1,
    "context_parallel_size": 1,
    "expert_model_parallel_size": 1,
    "expert_tensor_parallel_size": None,
    "sequence_parallel": False,
    "tp_comm_overlap": False,
    "overlap_grad_reduce": False,
    "overlap_param_gather": False,
    "align_grad_reduce": True,
    "align_param_gather": True,
    "use_distributed_optimizer": False,
    "accumulate_allreduce_grads_in_fp32": False,
    "ddp_average_in_collective": False,
    "ddp_bucket_size": None,
    "optimizer": "adam",
    "lr": None,
    "min_lr": 0.0,
    "weight_decay": 0.01,
    "start_weight_decay": None,
    "end_weight_decay": None,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_eps": 1e-08,
    "clip_grad": 1.0,
    "loss_scale": None,
    "micro_batch_size": None,
    "global_batch_size": None,
    "train_iters": None,
    "seed": 1234,
    "tokenizer_type": None,
    "tokenizer_model": None,
    "load": None,
    "save": None,
    "tensorboard_dir": None,
    "distributed_timeout_minutes": 10,
    "distributed_backend": "nccl",
}


@dataclass
class Recorded:
    """What the stand-ins were given."""

    plain: list[object] = field(default_factory=list)
    modes: list[object] = field(default_factory=list)
    validated: list[argparse.Namespace] = field(default_factory=list)
    refuse: Exception | None = None
    """Raised by `from_dict` when set (a container megatron cannot build)."""


class Mode(enum.Enum):
    STRICT = "strict"
    LENIENT = "lenient"


def section(name: str, values: dict[str, object]) -> object:
    """A dataclass instance holding `values` (nested dicts become sections too)."""
    made = dataclasses.make_dataclass(name, [(k, object) for k in values if k != "_target_"])
    return made(**{k: section(k, v) if isinstance(v, dict) else v for k, v in values.items() if k != "_target_"})


def validate_args(args: argparse.Namespace) -> None:
    assert args.start_weight_decay is None and args.end_weight_decay is None, "weight decays set before validate_args"
    model_parallel = args.tensor_model_parallel_size * args.pipeline_model_parallel_size
    if args.seq_length > args.max_position_embeddings:
        positions = args.max_position_embeddings
        raise ValueError(f"seq_length ({args.seq_length}) exceeds max_position_embeddings ({positions})")
    if args.world_size % model_parallel:
        raise AssertionError(f"world size ({args.world_size}) is not divisible by {model_parallel}")
    args.data_parallel_size = args.world_size // model_parallel


def install(monkeypatch: pytest.MonkeyPatch) -> Recorded:
    """Put the stand-ins in `sys.modules` for one test."""
    recorded = Recorded()

    class PretrainConfigContainer:
        @classmethod
        def from_dict(cls, plain: dict[str, object], mode: object) -> object:
            recorded.plain.append(plain)
            recorded.modes.append(mode)
            if recorded.refuse is not None:
                raise recorded.refuse
            return section("PretrainConfigContainer", plain)

    def add_megatron_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser.set_defaults(**ARGS)
        return parser

    def validate(args: argparse.Namespace) -> None:
        recorded.validated.append(args)
        validate_args(args)

    @dataclass
    class Config:
        size: int = 1

    class Kind(enum.Enum):
        A = 1

    class Plain:
        pass

    def function() -> None:
        pass

    Foreign = dataclasses.make_dataclass("Foreign", [("size", int)])
    Foreign.__module__ = "elsewhere"
    for kind in (Config, Kind, Plain, function):
        kind.__module__ = "megatron.configs"
    modules = {
        "megatron": {},
        "megatron.training": {},
        "megatron.training.config": {"PretrainConfigContainer": PretrainConfigContainer},
        "megatron.training.config.instantiate_utils": {"InstantiationMode": Mode},
        "megatron.training.arguments": {"add_megatron_arguments": add_megatron_arguments, "validate_args": validate},
        "megatron.configs": {"Config": Config, "Kind": Kind, "Plain": Plain, "function": function, "Foreign": Foreign},
    }
    for name, names in modules.items():
        module = types.ModuleType(name)
        module.__path__ = []  # type: ignore[attr-defined]  # a package: its submodules are looked up
        for key, value in names.items():
            setattr(module, key, value)
        monkeypatch.setitem(sys.modules, name, module)
    for name in modules:
        parent, _, child = name.rpartition(".")
        if parent:
            monkeypatch.setattr(sys.modules[parent], child, sys.modules[name], raising=False)
    return recorded
