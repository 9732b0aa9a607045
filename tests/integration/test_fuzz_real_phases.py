"""The documented way to fuzz a real provider: the Hypothesis machine over MegatronPhases (one rank)."""

from __future__ import annotations

import pytest

from lifecycle.launchers.local import run_ranks

pytestmark = pytest.mark.slow


def _fuzz_real_phases(examples: int) -> tuple[bool, int, str]:
    import io
    import unittest

    from hypothesis import HealthCheck, settings

    from lifecycle import RunConfig
    from lifecycle.core_entry import MegatronPhases
    from lifecycle.testing import lifecycle_state_machine

    config = RunConfig.preset("tiny-gpt", ["model.hidden_size=32", "model.seq_length=16"])
    machine = lifecycle_state_machine(config=config, provider="copying", phases_factory=MegatronPhases)
    machine.TestCase.settings = settings(
        max_examples=examples, stateful_step_count=20, deadline=None, suppress_health_check=list(HealthCheck)
    )
    stream = io.StringIO()
    result = unittest.TextTestRunner(stream=stream).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(machine.TestCase)
    )
    return result.wasSuccessful(), result.testsRun, stream.getvalue()


def test_the_state_machine_fuzzes_the_real_megatron_phases_with_a_copying_provider() -> None:
    [(ok, ran, output)] = run_ranks(_fuzz_real_phases, 1, 8, timeout_s=600)
    assert ok and ran == 1, output
