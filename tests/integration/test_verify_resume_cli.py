"""`lifecycle verify-resume`, each run in fresh processes on CPU ranks: a resume with dropout on
two tensor-parallel ranks is bitwise the uninterrupted run (the checkpoint carries every rank's random
streams); a model with state that no checkpoint holds is caught at the first resumed step; a config whose
checkpoints cannot run here is refused with its reason before anything trains. Main environment only:
what it runs is tested on both by test_checkpoints.py and test_resume_window.py."""

from __future__ import annotations

import pytest

from tests.child_python import run_lifecycle

pytestmark = [pytest.mark.slow, pytest.mark.release_independent]
lifecycle = run_lifecycle


def test_a_resume_with_dropout_on_two_tensor_parallel_ranks_is_bitwise_the_uninterrupted_run() -> None:
    tp_dropout = ("--set", "parallel.tp=2", "--set", "model.hidden_dropout=0.1")
    done = lifecycle("verify-resume", "--steps", "2", *tp_dropout, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "bitwise equal: steps 1-4 on every rank (loss, gradient norm, " in done.stdout
    assert done.stdout.count("the window from the load to step 3: no random stream moved; the optimizer's") == 2


def test_state_that_no_checkpoint_holds_is_named_at_the_first_resumed_step() -> None:
    provider = "tests.integration.resume_cases:counting_provider"
    done = lifecycle("verify-resume", "--steps", "1", "--nproc", "1", "--provider", provider, timeout=900)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "NOT EQUAL: rank 0: step 2: loss " in done.stdout and " resumed" in done.stdout


def test_a_config_whose_checkpoints_cannot_run_here_is_refused_with_its_reason() -> None:
    done = lifecycle("verify-resume", "--set", "ddp.use_distributed_optimizer=true")
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.splitlines()  # one line, before any rank starts
    assert line.startswith("lifecycle verify-resume: ddp.use_distributed_optimizer=True: with checkpoint.save")
    assert "the distributed optimizer's checkpoints need Apex or Transformer Engine" in line
    assert done.stdout == ""
