"""The window from a checkpoint load to the first step: MODEL_BUILT hashes every random stream
after the load, the first step hashes them again, and a stream that moved is named with its caller, as is
a first step that does not continue the checkpoint's; `lifecycle audit` reports both as LA027. Real
megatron-core, one spawned CPU rank (resume_cases.py), ~20 s.

Five public bugs replayed: a warmup draw (Megatron-Bridge #5255), a DataLoader's base seed (#5257), a
re-seed after the load (ms-swift #9935), the resume offset applied twice (Megatron-Bridge #4565), the
optimizer's state lost (#3832). Every other shipped provider resumes with nothing found.
"""

from __future__ import annotations

from typing import Any

import pytest

from lifecycle.launchers.local import run_ranks
from tests.integration import resume_cases

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cases() -> dict[str, Any]:
    [out] = run_ranks(resume_cases.run_all, 1, timeout_s=600)
    return out


def test_a_clean_resume_records_every_stream_and_finds_nothing(cases: dict[str, Any]) -> None:
    case = cases["clean"]
    [restored] = case["restored"]
    assert restored["step"] == resume_cases.SAVED and restored["watched"] > 40
    assert {"python", "numpy", "torch"} <= set(restored["streams"])
    assert any(name.startswith("megatron:") for name in restored["streams"])  # the model-parallel tracker's
    [checked] = case["checked"]
    assert (checked["step"], checked["restored_step"], checked["moved"]) == (3, 2, [])
    assert checked["streams"] == len(restored["streams"]) and case["la027"] == []
    counts = {"steps": [float(resume_cases.SAVED)], "loss_scale": None}  # Adam's step: one per step trained
    assert restored["optimizer"] == restored["saved_optimizer"] == counts
    assert checked["optimizer"] == checked["saved_optimizer"] == counts


@pytest.mark.parametrize("provider", resume_cases.SHIPPED)
def test_every_shipped_provider_resumes_with_no_stream_moved(cases: dict[str, Any], provider: str) -> None:
    case = cases[provider]
    assert [c["moved"] for c in case["checked"]] == [[]] and case["la027"] == []
    assert case["restored"][0]["step"] == resume_cases.SAVED and case["first"] == resume_cases.SAVED + 1


def test_a_fresh_run_opens_no_window(cases: dict[str, Any]) -> None:
    assert cases["fresh"] == []


def test_draws_from_generators_of_ones_own_move_no_stream(cases: dict[str, Any]) -> None:
    case = cases["own_generators"]
    assert case["checked"][0]["moved"] == [] and case["la027"] == []


def test_a_resume_with_a_data_loader_of_its_own_generator_finds_nothing(cases: dict[str, Any]) -> None:
    [checked] = cases["data_clean"]["checked"]
    assert set(checked["data"]) == {"data:loader.generator", "data:dataset.rng"}
    assert checked["moved"] == [] and cases["data_clean"]["la027"] == []


@pytest.mark.parametrize(
    ("label", "stream", "caller"),
    [
        ("data_loader_generator", "data:loader.generator", "in data_loader_generator (torch.Tensor.random_)"),
        ("data_numpy_dataset", "data:dataset.rng", "in __getitem__ (numpy.random._generator.Generator.random)"),
    ],
)
def test_a_data_generator_drawn_between_the_load_and_the_first_step_is_named_with_its_caller(
    cases: dict[str, Any], label: str, stream: str, caller: str
) -> None:
    case = cases[label]
    [checked] = case["checked"]
    [moved] = checked["moved"]  # the data's own generator only: no global stream moved
    assert moved["stream"] == stream and moved["restored"] != moved["found"]
    assert moved["caller"].startswith("tests/integration/resume_cases.py:") and moved["caller"].endswith(caller)
    [finding] = case["la027"]
    assert f"{stream} by tests/integration/resume_cases.py:" in finding
    assert "create the data iterator before the load" in finding


@pytest.mark.parametrize(
    ("label", "streams", "caller"),
    [
        ("warmup_5255", {"torch"}, "in warmup_5255 (torch.randn)"),
        ("data_loader_5257", {"torch"}, "in data_loader_5257 (torch.Tensor.random_)"),
        ("reseed_9935", {"torch"}, "in reseed_9935 (torch.manual_seed)"),
    ],
)
def test_a_stream_drawn_between_the_load_and_the_first_step_is_named_with_its_caller(
    cases: dict[str, Any], label: str, streams: set[str], caller: str
) -> None:
    case = cases[label]
    [checked] = case["checked"]
    moved = {m["stream"]: m for m in checked["moved"]}
    assert streams <= set(moved), moved
    [first] = [moved[name] for name in streams]
    assert first["caller"].startswith("tests/integration/resume_cases.py:") and first["caller"].endswith(caller)
    assert first["restored"] != first["found"]
    [finding] = case["la027"]
    assert "moved between the checkpoint load (step 2) and the first step" in finding and label in finding


def test_a_reseed_of_megatrons_tracker_is_named(cases: dict[str, Any]) -> None:
    moved = {m["stream"]: m for m in cases["tracker_reseed"]["checked"][0]["moved"]}
    tracker = [m for name, m in moved.items() if name.startswith("megatron:")]
    assert tracker and all("model_parallel_cuda_manual_seed" in m["caller"] for m in tracker)


def test_a_first_step_that_does_not_continue_the_checkpoint_is_named(cases: dict[str, Any]) -> None:
    case = cases["offset_4565"]
    assert case["first"] == 5
    [checked] = case["checked"]
    assert (checked["step"], checked["restored_step"], checked["moved"]) == (5, 2, [])
    [finding] = case["la027"]
    assert "is step 5, not 3" in finding


def test_an_optimizer_state_built_again_after_the_load_is_named(cases: dict[str, Any]) -> None:
    case = cases["optimizer_3832"]
    [checked] = case["checked"]
    assert checked["optimizer"]["steps"] == [] and checked["saved_optimizer"]["steps"] == [2.0]
    assert case["restored"][0]["optimizer"]["steps"] == [2.0]  # the load brought it back; the hook dropped it
    [finding] = case["la027"]
    assert finding.startswith("the optimizer state at the first step is not the checkpoint's: step counts []")


def test_a_save_leaves_no_process_of_megatrons_writer_behind(cases: dict[str, Any]) -> None:
    # megatron's checkpoint writer serves its results queue from a spawned Manager process that would
    # outlive a rank killed later, holding its launcher's output open (test_restart_torchrun.py hung)
    assert cases["children_after_save"] == 0
