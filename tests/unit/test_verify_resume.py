"""`lifecycle verify-resume`'s comparison (`lifecycle.resume.verify.first_difference`), without torch: the
first step that differs, then the first rank, then the loss, the gradient norm and each tensor in the
model's order; a step one run lacks; None when every step is equal on every rank. And its exit status
for a failed run: 2 only when every rank refused the config."""

from __future__ import annotations

import copy

import pytest

from lifecycle.resume.verify import StepDigest, first_difference
from lifecycle.testing import verify_resume_failed


def step(number: int, loss: str = "2.5", **tensors: str) -> StepDigest:
    return StepDigest(step=number, loss=loss, grad_norm="0.75", tensors={"param a": "01", "param b": "02", **tensors})


WHOLE = [[step(1), step(2)], [step(1), step(2)]]


def test_equal_histories_have_no_difference() -> None:
    assert first_difference(WHOLE, copy.deepcopy(WHOLE)) is None


def test_the_first_step_is_named_before_a_later_one_and_the_first_rank_before_another() -> None:
    resumed = copy.deepcopy(WHOLE)
    resumed[1][0].loss = "2.6"  # rank 1, step 1
    resumed[0][1].grad_norm = "0.8"  # rank 0, step 2
    assert first_difference(WHOLE, resumed) == "rank 1: step 1: loss 2.5 uninterrupted, 2.6 resumed"


def test_a_tensor_is_named_in_the_models_order_with_both_hashes() -> None:
    resumed = copy.deepcopy(WHOLE)
    resumed[0][1].tensors = {"param a": "01", "param b": "0f", "optimizer b.exp_avg": "03"}
    found = first_difference(WHOLE, resumed)
    assert found == "rank 0: step 2: param b differs (hash 02 uninterrupted, 0f resumed)"
    resumed[0][1].tensors["param b"] = "02"
    assert first_difference(WHOLE, resumed) == (
        "rank 0: step 2: optimizer b.exp_avg differs (hash absent uninterrupted, 03 resumed)"
    )


def test_a_step_the_resumed_run_lacks_or_numbers_otherwise_is_named() -> None:
    assert first_difference(WHOLE, [[step(1)], [step(1)]]) == "rank 0: the resumed run has no step 2"
    shifted = [[step(1), step(3)], [step(1), step(3)]]
    assert first_difference(WHOLE, shifted) == "rank 0: step 2 uninterrupted is step 3 resumed"


def test_a_tensor_the_resumed_run_does_not_have_at_all_is_a_difference() -> None:
    resumed = copy.deepcopy(WHOLE)
    del resumed[1][0].tensors["param b"]  # rank 1's first step: only param a
    assert first_difference(WHOLE, resumed) == "rank 1: step 1: param b differs (hash 02 uninterrupted, absent resumed)"
    resumed[1][0].tensors = {}
    assert first_difference(WHOLE, resumed) == "rank 1: step 1: param a differs (hash 01 uninterrupted, absent resumed)"


def test_a_step_the_resumed_run_has_beyond_the_uninterrupted_ones_is_named() -> None:
    longer = [[step(1), step(2), step(3)], [step(1), step(2), step(3)]]
    assert first_difference(WHOLE, longer) == "rank 0: the uninterrupted run has no step 3"


def test_runs_that_recorded_different_rank_counts_are_a_difference_not_a_comparison_of_the_common_ranks() -> None:
    assert first_difference(WHOLE, WHOLE[:1]) == "ranks recorded: 2 uninterrupted, 1 resumed"
    assert first_difference(WHOLE[:1], WHOLE) == "ranks recorded: 1 uninterrupted, 2 resumed"


def test_histories_with_no_step_at_all_are_not_reported_equal() -> None:
    assert first_difference([[], []], [[], []]) == "no step was recorded on any rank"
    assert first_difference([], []) == "no step was recorded on any rank"


def test_a_run_is_refused_input_only_when_every_rank_raised_configerror_not_when_a_message_names_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    refused = {0: "ConfigError: the config has 1 problem(s): ...", 1: "ConfigError: the config has 1 problem(s): ..."}
    assert verify_resume_failed("first", refused) == 2
    named = {0: "RuntimeError: megatron raised ConfigError while loading", 1: "ConfigError: the config has 1 problem"}
    assert verify_resume_failed("first", named) == 1
    assert verify_resume_failed("second", {0: "ValueError: not a ConfigError: the shapes differ"}) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        "lifecycle verify-resume: the second run's rank 0 failed: ValueError: not a ConfigError: the shapes differ."
    )
