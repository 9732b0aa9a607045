"""The stand-ins of megatron that the fast unit tests of the drop-in's YAML loader and RunConfig
derivation use (tests/fake_megatron.py) agree with the real megatron they stand for, on the main
environment: the same argument names, the same defaults where they keep megatron's, the same
instantiation modes, and the same refusals and derivations by `validate_args`. A stand-in that drifts
from megatron fails here, not silently in the unit tests."""

from __future__ import annotations

import argparse

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

from tests import fake_megatron

# The stand-in sets a small GPT where megatron leaves the choice to the user; everything else is the default.
CHOSEN = {"num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "seq_length", "lr"}


def _real_args() -> argparse.Namespace:
    from megatron.training.arguments import add_megatron_arguments

    return add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False)).parse_args([])


def test_every_stand_in_argument_is_megatrons_with_megatrons_default() -> None:
    real = vars(_real_args())

    assert set(fake_megatron.ARGS) - set(real) == set()
    differ = {k: (v, real[k]) for k, v in fake_megatron.ARGS.items() if k not in CHOSEN and real[k] != v}
    assert differ == {}


def test_the_instantiation_modes_and_the_container_entry_point_are_megatrons() -> None:
    from megatron.training.config import PretrainConfigContainer
    from megatron.training.config.instantiate_utils import InstantiationMode

    assert {m.name: m.value for m in fake_megatron.Mode} == {
        m.name: m.value for m in InstantiationMode if m.name in ("STRICT", "LENIENT")
    }
    assert callable(PretrainConfigContainer.from_dict)


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        ({}, None),
        ({"seq_length": 256, "max_position_embeddings": 128}, "max_position_embeddings"),
        ({"world_size": 3, "tensor_model_parallel_size": 2}, "divisible"),
    ],
)
def test_validate_args_refuses_and_derives_what_the_stand_in_does(
    change: dict[str, object], refused: str | None
) -> None:
    from megatron.training.arguments import validate_args

    def made() -> argparse.Namespace:
        args = _real_args()
        small = {k: v for k, v in fake_megatron.ARGS.items() if k in CHOSEN and v is not None}
        for key, value in {
            **small,
            "max_position_embeddings": 128,
            "micro_batch_size": 1,
            "rank": 0,
            "world_size": 2,
            "transformer_impl": "local",
            "lr": 1e-4,
            "train_iters": 10,
            **change,
        }.items():
            setattr(args, key, value)
        return args

    real, stand_in = made(), made()
    outcomes = []
    for validate, args in ((validate_args, real), (fake_megatron.validate_args, stand_in)):
        try:
            validate(args)
            outcomes.append(("derived", args.data_parallel_size))
        except (AssertionError, ValueError) as exc:
            outcomes.append(("refused", refused is not None and refused in str(exc)))
    assert outcomes[0] == outcomes[1] == (("refused", True) if refused else ("derived", 2))
