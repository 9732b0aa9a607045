"""The drop-in's `pretrain` saving and resuming with Megatron-LM's own checkpointing, on a world of one
rank in the test process (gloo, no rank launched): three runs of the example script's tiny GPT into
one checkpoint directory, each from a fresh world.

- `first`: 1 iteration, save interval 2, asynchronous saves: saved at its last iteration by the save
  `pretrain` makes after `train()`, finished and its writer gone when `pretrain` returns;
- `resumed`: loads it, trains to iteration 4 with interval 2: `train()` saves at 2 and 4, and
  nothing is saved twice; its log names what it loaded;
- `older`: `--ckpt-step 2` loads iteration 2 of a directory whose latest is 4.

The two-rank resume runs (the public resume bugs replayed, `--no-load-optim`) are
tests/integration/test_megatron_lm_resume.py's, launched ranks."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

import psutil
from megatron.training import global_vars
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lifecycle.lm_dropin import pretrain
from tests.integration.test_lm_dropin_pretrains_a_tiny_gpt_in_one_process import _events, _records, one_rank, script

SAVED = re.compile(r"saving checkpoint at iteration +(\d+) to ")


def _run(log_dir: Path, argv: list[str]) -> dict[str, Any]:
    """One run of the script through the drop-in: its result, the iterations it saved (as Megatron-LM
    prints them), its log's records, and the child processes left once `pretrain` returned."""
    with one_rank(), contextlib.redirect_stdout(io.StringIO()) as printed:
        result = script.main(pretrain=lambda *a: pretrain(*a, log_dir=log_dir), extra_argv=argv)
        children = _children()
        if global_vars._GLOBAL_TENSORBOARD_WRITER is not None:  # the script's: flushed as its exit would
            global_vars._GLOBAL_TENSORBOARD_WRITER.flush()
    saved = [int(m.group(1)) for m in map(SAVED.search, printed.getvalue().splitlines()) if m]
    return {
        "result": result,
        "saved": saved,
        "records": _records(log_dir),
        "children": children,
        "printed": printed.getvalue(),
    }


def _children() -> set[int]:
    """This process's child processes now (those of earlier tests in the same pytest included)."""
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("checkpoints")
    ck = str(root / "ck")
    out: dict[str, Any] = {"children_before": _children()}
    out["first"] = _run(root / "first", ["--train-iters", "1", "--save", ck, "--save-interval", "2", "--async-save"])
    out["first_tracker"] = (root / "ck" / "latest_checkpointed_iteration.txt").read_text()
    resume = ["--load", ck, "--override-opt-param-scheduler"]  # the scheduler's total changes with train-iters
    out["resumed"] = _run(
        root / "resumed", ["--train-iters", "4", "--save", ck, "--save-interval", "2", "--async-save", *resume]
    )
    out["older"] = _run(root / "older", ["--train-iters", "3", "--ckpt-step", "2", *resume])
    out["rewound"] = _run(root / "rewound", ["--train-iters", "3", "--override-ckpt-iteration", "2", *resume])
    tensorboard = str(root / "tensorboard")
    evaluate = ["--skip-train", "--split", "98,1,1", "--eval-iters", "1", "--tensorboard-dir", tensorboard]
    # told to train to 6, and to skip training: it evaluates iteration 4, as loaded
    out["evaluated"] = _run(root / "evaluated", ["--train-iters", "6", *evaluate, *resume])
    events = EventAccumulator(tensorboard)
    events.Reload()
    out["evaluated"]["tensorboard"] = sorted(events.Tags()["scalars"])
    out["kept"] = sorted(p.name for p in (root / "ck").iterdir())
    return out


def test_a_run_ending_between_save_intervals_is_saved_at_its_last_iteration_and_finished_before_pretrain_returns(
    runs: dict[str, Any],
) -> None:
    first = runs["first"]
    assert (first["result"]["iteration"], first["saved"]) == (1, [1])  # 1 is no multiple of the interval, 2
    assert runs["first_tracker"] == "1"  # the asynchronous save finalized: Megatron-LM writes it last
    # The asynchronous saves' writer processes ended with them: a second run leaves no process the first
    # did not, and the first at most two (Megatron-LM's cached results-queue manager, multiprocessing's tracker).
    assert runs["resumed"]["children"] <= first["children"]
    assert len(first["children"] - runs["children_before"]) <= 2


def test_a_run_ending_on_a_save_interval_is_saved_there_once(runs: dict[str, Any]) -> None:
    assert runs["resumed"]["saved"] == [2, 4]
    assert runs["kept"] == ["iter_0000001", "iter_0000002", "iter_0000004", "latest_checkpointed_iteration.txt"]


def test_a_resumed_run_logs_the_iteration_data_position_and_optimizer_counts_it_loaded(runs: dict[str, Any]) -> None:
    records = runs["resumed"]["records"]
    (restored,) = _events(records, "streams_restored")
    assert restored["step"] == 1
    assert restored["position"] == {"consumed_samples": 4, "iteration": 1}  # the global batch is 4
    assert restored["saved_optimizer"] == restored["optimizer"] == {"loss_scale": None, "steps": [1.0]}
    assert [r["step"] for r in _events(records, "step_completed")] == [2, 3, 4]  # counted on from the load
    (checked,) = _events(records, "streams_checked")
    assert (checked["step"], checked["restored_position"]) == (2, restored["position"])


def test_a_run_told_to_load_an_older_checkpoint_compares_with_that_checkpoints_counts(runs: dict[str, Any]) -> None:
    records = runs["older"]["records"]
    (restored,) = _events(records, "streams_restored")
    assert restored["step"] == 2
    assert restored["position"] == {"consumed_samples": 8, "iteration": 2}
    assert restored["saved_optimizer"] == {"loss_scale": None, "steps": [2.0]}  # iteration 2's, not 4's
    assert [r["step"] for r in _events(records, "step_completed")] == [3]
    assert runs["older"]["saved"] == []  # no --save: nothing saved at its end


def test_a_run_rewound_by_override_ckpt_iteration_compares_no_optimizer_counts_with_the_checkpoint(
    runs: dict[str, Any],
) -> None:
    records = runs["rewound"]["records"]
    (restored,) = _events(records, "streams_restored")
    assert (restored["step"], restored["position"]) == (2, {"consumed_samples": 8, "iteration": 2})
    assert restored["optimizer"] == {"loss_scale": None, "steps": [4.0]}  # iteration 4's state, loaded
    assert "saved_optimizer" not in restored  # not iteration 2's counts: the checkpoint loaded was 4's
    assert [r["step"] for r in _events(records, "step_completed")] == [3]


def test_a_validation_only_run_evaluates_the_loaded_model_without_training_or_binding_again(
    runs: dict[str, Any],
) -> None:
    evaluated = runs["evaluated"]
    # train() never ran: no step, no second binding of the callbacks
    assert evaluated["result"] == {"iteration": 4, "losses": [], "second_binding_dropped": []}
    assert _events(evaluated["records"], "step_completed") == []
    lines = [line.split("|")[0].strip() for line in evaluated["printed"].splitlines() if "loss at iteration" in line]
    assert lines == ["validation loss at iteration 4 on validation set", "validation loss at iteration 4 on test set"]
    # as Megatron-LM's pretrain: a run that skips training writes no evaluation to tensorboard
    assert [tag for tag in evaluated["tensorboard"] if "validation" in tag] == []
