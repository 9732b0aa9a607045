"""A script that replaces a name Megatron-LM's `pretrain` would call but the drop-in does not run (its
startup timers, `initialize_megatron`'s persistent checkpoint worker: `_late.LOOKUPS`) is refused at VALIDATED,
before any side effect, with one problem per name naming it and the script's function, instead of
training with the replacement silently ignored. One spawned rank."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

from lifecycle.launchers.local import run_ranks
from tests.integration import lm_dropin_late_cases


@pytest.fixture(scope="module")
def refused() -> dict[str, Any]:
    return run_ranks(lm_dropin_late_cases.patched_not_run, 1, timeout_s=300)[0]


def test_a_replaced_name_the_drop_in_does_not_call_is_refused_at_validated(refused: dict[str, Any]) -> None:
    assert refused["error"] == "ConfigError", refused
    assert refused["entered"] == ["FAILED", "SHUT_DOWN"]  # nothing after CONFIGURED: no side effect


def test_the_refusal_names_each_replaced_name_and_the_scripts_function(refused: dict[str, Any]) -> None:
    message = refused["message"]
    for name, patch in (
        ("megatron.training.training.print_datetime", "patched_not_run.<locals>.print_datetime"),
        (
            "megatron.training.initialize.init_persistent_async_worker",
            "patched_not_run.<locals>.init_persistent_async_worker",
        ),
    ):
        assert f"{name} is replaced by tests.integration.lm_dropin_late_cases.{patch}" in message
    assert "startup timers" in message and "--use-persistent-ckpt-worker" in message
