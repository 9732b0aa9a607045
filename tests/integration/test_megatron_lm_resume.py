"""The drop-in's resumes are watched: the example script under `lifecycle.lm_dropin.pretrain`
trained 2 iterations with Megatron-LM's save, then resumed from it with Megatron-LM's load. MODEL_BUILT
hashes every random stream and reads Megatron-LM's data position (consumed samples, iteration) after the
load; the first `train_step` reads them again.

Megatron-LM's own resume moves one stream: its train iterator is `iter(DataLoader)` without a generator,
which draws the loader's base seed from torch's CPU stream after the load (Megatron-Bridge #5257's
pattern, in `build_train_valid_test_data_iterators`'s `_get_iterator`); the window names it. A warmup
draw in the script's dataset provider (#5255) is named with its caller, and data started again from
sample 0 (#3503) is a position that does not continue the load's; `lifecycle audit` reports each as
LA027 (one finding per record, each divergence said in it).

The optimizer's step counts and loss scale are compared with those Megatron-LM's checkpoint was saved with,
read from the optimizer state its common state keeps: equal on a clean resume, named when the state did not
come back (`--no-load-optim`). A resume told to train to the iteration it loads reaches no first step: the
release takes the window's wrappers off, unchecked, and nothing is reported. One rank process runs the five
runs (`megatron_lm_runs.runs`), ~30 s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

from lifecycle.audit import audit
from lifecycle.launchers.local import run_ranks
from lifecycle.resume.checkpoint import megatron_lm_optimizer_counts
from tests.integration import megatron_lm_resume_cases as cases
from tests.integration import megatron_lm_runs

pytestmark = pytest.mark.slow
SAVED = cases.SAVED
MEGATRON_LMS_DRAW = "in _get_iterator (torch.Tensor.random_)"


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    """The logs' root, and what each run left in the rank process (keyed "case-lifecycle")."""
    root = tmp_path_factory.mktemp("resume")
    order = cases.order(str(root / "checkpoints"))
    [out] = run_ranks(megatron_lm_runs.runs, 1, order, str(root), cases.HOOKS, timeout_s=900)
    return root, out


@pytest.fixture(scope="module")
def logs(ran: tuple[Path, dict[str, dict[str, Any]]]) -> Path:
    return ran[0]


def _records(logs: Path, case: str, event: str) -> list[dict[str, Any]]:
    lines = (logs / case / "rank-00000.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["event"] == event]


def _la027(logs: Path, case: str) -> list[str]:
    findings = audit([str(logs / case / "rank-00000.jsonl")], jobs=1).findings
    return [f.message for f in findings if f.rule == "LA027"]


def test_a_fresh_drop_in_run_opens_no_window(logs: Path) -> None:
    assert _records(logs, "saved", "streams_restored") == _records(logs, "saved", "streams_checked") == []


def test_a_drop_in_resume_records_every_stream_and_the_data_position_after_megatron_lms_load(logs: Path) -> None:
    [restored] = _records(logs, "resumed", "streams_restored")
    assert restored["step"] == SAVED and restored["watched"] > 40
    assert {"python", "numpy", "torch"} <= set(restored["streams"])
    assert any(name.startswith("megatron:") for name in restored["streams"])
    assert restored["position"] == {"consumed_samples": cases.GLOBAL_BATCH * SAVED, "iteration": SAVED}
    [checked] = _records(logs, "resumed", "streams_checked")
    assert (checked["step"], checked["restored_step"]) == (SAVED + 1, SAVED)
    assert checked["position"] == checked["restored_position"] == restored["position"]
    assert [r["step"] for r in _records(logs, "resumed", "step_completed")] == [SAVED + 1, SAVED + 2]
    # the train iterator given to the window: megatron's batch sampler's position, through RerunDataIterator
    assert "data:batch_sampler" in checked["data"]


def test_megatron_lms_own_train_iterator_draws_its_base_seed_after_the_load_and_is_named(logs: Path) -> None:
    [checked] = _records(logs, "resumed", "streams_checked")
    [moved] = checked["moved"]
    assert moved["stream"] == "torch" and moved["restored"] != moved["found"]
    assert "megatron/training/training.py:" in moved["caller"] and moved["caller"].endswith(MEGATRON_LMS_DRAW)
    [finding] = _la027(logs, "resumed")
    assert "1 random stream moved between the checkpoint load (step 2)" in finding and "_get_iterator" in finding


def test_a_draw_in_the_drop_ins_dataset_provider_after_the_load_is_named_with_its_caller(logs: Path) -> None:
    [checked] = _records(logs, "replayed", "streams_checked")
    [moved] = checked["moved"]
    assert moved["stream"] == "torch" and moved["restored"] != moved["found"]
    assert moved["caller"].startswith("tests/integration/megatron_lm_resume_cases.py:")
    assert moved["caller"].endswith("in warmup_draw (torch.randn)")  # the first draw's caller: the script's
    [finding] = _la027(logs, "replayed")
    assert finding.startswith("1 random stream moved") and "warmup_draw" in finding


def test_data_started_again_from_sample_0_after_the_load_is_a_position_that_does_not_continue_it(logs: Path) -> None:
    [checked] = _records(logs, "replayed", "streams_checked")
    assert checked["step"] == SAVED + 1  # the iteration came back; the samples consumed did not
    assert checked["restored_position"] == {"consumed_samples": cases.GLOBAL_BATCH * SAVED, "iteration": SAVED}
    assert checked["position"] == {"consumed_samples": 0, "iteration": SAVED}
    [finding] = _la027(logs, "replayed")  # one per record: the stream the script drew from, then this
    assert "the data position at the first step is not the one the checkpoint load left (consumed_samples 8 → 0)" in (
        finding
    )


def test_a_clean_drop_in_resume_reports_the_optimizer_counts_megatron_lms_checkpoint_was_saved_with(
    logs: Path,
) -> None:
    counts = {"steps": [float(SAVED)], "loss_scale": None}  # Adam's step, read back from the checkpoint
    [restored] = _records(logs, "resumed", "streams_restored")
    assert restored["optimizer"] == restored["saved_optimizer"] == counts
    [checked] = _records(logs, "resumed", "streams_checked")
    assert checked["optimizer"] == checked["saved_optimizer"] == counts
    [finding] = _la027(logs, "resumed")  # Megatron-LM's own draw only
    assert "optimizer" not in finding


def test_a_drop_in_resume_without_the_optimizers_state_is_named_with_the_step_counts(logs: Path) -> None:
    [restored] = _records(logs, "no_optim", "streams_restored")
    assert restored["optimizer"]["steps"] == [] and restored["saved_optimizer"]["steps"] == [float(SAVED)]
    [checked] = _records(logs, "no_optim", "streams_checked")
    assert checked["optimizer"] == {"steps": [], "loss_scale": None}
    assert checked["saved_optimizer"] == {"steps": [float(SAVED)], "loss_scale": None}
    [finding] = _la027(logs, "no_optim")  # Megatron-LM's own draw, then this
    assert (
        "the optimizer state at the first step is not the checkpoint's: step counts [] and loss scale None, "
        "saved with [2.0] and None"
    ) in finding


def test_a_drop_in_resume_with_no_step_to_train_closes_its_window_unchecked_on_release(
    ran: tuple[Path, dict[str, dict[str, Any]]],
) -> None:
    logs, out = ran
    [restored] = _records(logs, "no_step", "streams_restored")  # the window opened after the load
    assert restored["step"] == SAVED and restored["watched"] > 40
    assert restored["optimizer"] == restored["saved_optimizer"]
    assert _records(logs, "no_step", "step_completed") == _records(logs, "no_step", "streams_checked") == []
    assert _records(logs, "no_step", "lifecycle_shutdown")  # released as every drop-in run is
    assert out["no_step-lifecycle"]["own"]["wrapped"] == []  # no draw or seed entry point left wrapped
    assert out["no_step-lifecycle"]["losses"] == []
    assert _la027(logs, "no_step") == []


def test_no_drop_in_run_leaves_an_entry_point_wrapped(ran: tuple[Path, dict[str, dict[str, Any]]]) -> None:
    assert {key: run["own"]["wrapped"] for key, run in ran[1].items()} == {
        f"{case}-lifecycle": [] for case, *_ in cases.order("")
    }


def test_the_counts_are_read_only_from_the_checkpoint_of_the_iteration_megatron_lm_loaded(logs: Path) -> None:
    saved = logs / "checkpoints" / f"iter_{SAVED:07d}"
    assert megatron_lm_optimizer_counts(saved, SAVED) == {"steps": [float(SAVED)], "loss_scale": None}
    # a newer non-persistent checkpoint loaded instead, or an overridden iteration: nothing to compare
    assert megatron_lm_optimizer_counts(saved, SAVED + 1) is None
    assert megatron_lm_optimizer_counts(logs / "checkpoints" / "iter_0000009", 9) is None  # none there
