"""Model providers in every shape a Megatron-LM user has, through the drop-in's startup on one rank:
Megatron-LM's keyword function (with `config=` and `pg_collection=`), the lifecycle's shape, a
`ModelBuilder`, a `ModelConfig`, a Megatron-Bridge-style `.provide` object; an unusable object
refused at VALIDATED in a short message; a provider that raises, named with its file:line."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

from lifecycle.engine.launch import run_ranks
from tests.integration import megatron_lm_cases

pytestmark = pytest.mark.slow
BUILT = ["VALIDATED", "SERVICES_READY", "DISTRIBUTED", "MODEL_BUILT", "CALLBACKS_BOUND", "SHUT_DOWN"]


@pytest.fixture(scope="module")
def shapes() -> dict[str, Any]:
    return run_ranks(megatron_lm_cases.provider_shapes, 1, timeout_s=400)[0]


@pytest.mark.parametrize("label", ["keyword", "lifecycle", "builder", "model_config", "bridge"])
def test_each_provider_shape_builds_and_binds(shapes: dict[str, Any], label: str) -> None:
    assert "error" not in shapes[label], shapes[label]
    assert shapes[label]["entered"] == BUILT


def test_an_unusable_object_is_refused_at_validated_in_a_short_message(shapes: dict[str, Any]) -> None:
    case = shapes["refused"]
    assert case["error"] == "ConfigError"
    assert case["entered"] == ["FAILED", "SHUT_DOWN"]  # nothing was built: refused before any side effect
    line = next(p for p in case["message"].splitlines() if "model_provider" in p)
    shape = line[line.index("model_provider: a") : line.index("; fix:")]
    assert len(shape) <= 300
    assert "NotAProvider" in shape and "megatron_lm_cases.py:" in shape and ".provide()" in shape
    assert "xxxx" not in case["message"]


def test_a_failing_provider_is_named_with_its_file_and_line(shapes: dict[str, Any]) -> None:
    case = shapes["failing"]
    assert case["error"] == "ProviderError"
    assert "provider_shapes.<locals>.failing" in case["message"]
    assert "megatron_lm_cases.py:" in case["message"] and "no weights here" in case["message"]
    assert case["entered"] == ["VALIDATED", "SERVICES_READY", "DISTRIBUTED", "FAILED", "SHUT_DOWN"]


def test_a_container_that_disagrees_with_the_args_is_refused_at_validated(shapes: dict[str, Any]) -> None:
    case = shapes["mismatch"]
    assert case["error"] == "ConfigError"
    assert case["entered"] == ["FAILED", "SHUT_DOWN"]
    assert "model.transformer.num_layers=4" in case["message"]
    assert "Megatron-LM's args say 2" in case["message"]
