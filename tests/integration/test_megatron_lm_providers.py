"""Model providers in every shape a Megatron-LM user has, through the drop-in's startup on one rank:
Megatron-LM's keyword function (with `config=` and `pg_collection=`), the lifecycle's shape, a
`ModelBuilder`, a `ModelConfig`, a Megatron-Bridge-style `.provide` object; an unusable object
refused at VALIDATED in a short message; a provider that raises, named with its file:line. In the
same process, the drop-in's ledger: what Megatron-LM's functions made, registered with the state
that made it, and gone after the shutdown."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

from lifecycle.launchers.local import run_ranks
from states import PLAN_TARGETS, STARTUP_ORDER, Plan, State
from tests.integration import megatron_lm_cases

pytestmark = pytest.mark.slow
# the states the drop-in's training startup enters (the chain after CONFIGURED, to the training plan's
# target), then the shutdown
BUILT = [*(s.name for s in STARTUP_ORDER[1 : PLAN_TARGETS[Plan.TRAINING].startup_index + 1]), State.SHUT_DOWN.name]


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tensorboard = tmp_path_factory.mktemp("tensorboard")
    return run_ranks(megatron_lm_cases.provider_shapes, 1, str(tensorboard), timeout_s=400)[0]


@pytest.mark.parametrize("label", ["keyword", "lifecycle", "builder", "model_config", "bridge"])
def test_each_provider_shape_builds_and_binds(shapes: dict[str, Any], label: str) -> None:
    assert "error" not in shapes[label], shapes[label]
    assert shapes[label]["entered"] == BUILT
    [settings] = shapes[label]["settings"]  # MODEL_BUILT compared what the script asked with the model
    assert settings["mismatches"] == [] and settings["compared"] > 100
    assert settings["objects"] == ["chunk 0's config", "chunk 0's DDP config", "the optimizer's config"]


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


TENSORBOARD = importlib.util.find_spec("tensorboard") is not None
# What the drop-in's work makes beyond the real phases' resources, per state, in creation order.
DROP_IN = {
    "SERVICES_READY": [
        "Megatron-LM args",
        "Megatron-LM tokenizer",
        *(["Megatron-LM tensorboard writer"] if TENSORBOARD else []),
        "Megatron-LM timers",
        "Megatron-LM energy monitor",
        *(["Megatron-LM tensorboard writer's event files"] if TENSORBOARD else []),
        "Megatron-LM micro-batch calculator",
    ],
    "DISTRIBUTED": ["rerun state machine", "megatron.training's CPU patches"],
    "MODEL_BUILT": ["optimizer parameter scheduler"],
}
# The real phases' resources that the drop-in's work makes too.
SHARED = {
    "DISTRIBUTED": ["process group", "megatron parallel state", "RNG tracker states", "CPU rehearsal patches"],
    "MODEL_BUILT": ["model chunk 0 (DDP grad hooks, forward pre-hooks)", "optimizer"],
    "CALLBACKS_BOUND": ["bound callbacks"],
}


def _named(ledger: list[tuple[str, str]], state: str) -> list[str]:
    return [name for s, name in ledger if s == state]


def test_the_ledger_names_what_megatron_lms_functions_made_with_the_state_that_made_it(
    shapes: dict[str, Any],
) -> None:
    created = shapes["ledgers"]["created"]
    for state, names in DROP_IN.items():
        assert [n for n in _named(created["ledger"], state) if n in names] == names, state
    for state, names in SHARED.items():
        assert set(names) <= set(_named(created["ledger"], state)), state
    own = {(state, name) for state, names in DROP_IN.items() for name in names}
    assert own <= {tuple(e) for e in created["alive"]}  # each probe sees its resource while it lives


def test_the_scripts_own_global_variables_are_neither_registered_nor_released(shapes: dict[str, Any]) -> None:
    adopted = shapes["ledgers"]["adopted"]
    assert _named(adopted["ledger"], "SERVICES_READY") == []
    assert adopted["script_args_kept"]
    assert {"_GLOBAL_ARGS", "_GLOBAL_TOKENIZER", "_GLOBAL_TIMERS"} <= set(adopted["remaining"])
    for state in ("DISTRIBUTED", "MODEL_BUILT"):
        assert set(DROP_IN[state]) <= set(_named(adopted["ledger"], state))


@pytest.mark.parametrize("case", ["adopted", "created"])
def test_a_shutdown_leaves_nothing_of_the_ledger_alive(shapes: dict[str, Any], case: str) -> None:
    run = shapes["ledgers"][case]
    assert run["leaked"] == []
    assert run["after"] == []
    assert "rerun state machine" not in run["remaining"]
    if case == "created":  # the global variables set_global_variables made here are unset
        assert run["remaining"] == []
