"""The first step's `streams_checked` record read back: each random stream that moved between the
checkpoint load and the first step is finding LA027, naming the stream and its caller; so is a first
step that does not continue the checkpoint's, a data position that is not the one the load left, and an
optimizer whose counts are not the checkpoint's, each said in the one finding of its record.
A clean window is none."""

from __future__ import annotations

from pathlib import Path

from audit_logs import engine_rank

from lifecycle.audit import audit
from lifecycle.log import records

WARMUP = {"stream": "torch", "restored": "a365", "found": "af54", "caller": "train.py:88 in warmup (torch.rand)"}


def findings(
    log_dir: Path, moved: list[dict[str, str]], step: int = 3, restored: int = 2, **optimizer: object
) -> list[str]:
    lc = engine_rank(log_dir, 0, 1)
    lc.advance_to(lc.target)
    fields = {"step": step, "restored_step": restored, "moved": moved, "streams": 6, **optimizer}
    lc.record(records.StreamsChecked(**fields, duration_s=0.0003))
    lc.shutdown()
    result = audit([str(log_dir / "rank-00000.jsonl")], jobs=1)
    assert all(f.rule != "LA027" or f.rank == 0 for f in result.findings)
    return [f.message for f in result.findings if f.rule == "LA027"]


def test_a_stream_moved_before_the_first_step_is_a_finding_naming_it_and_its_caller(tmp_path: Path) -> None:
    [message] = findings(tmp_path, [WARMUP])
    assert message.startswith("1 random stream moved between the checkpoint load (step 2) and the first step: ")
    assert "torch by train.py:88 in warmup (torch.rand)" in message


def test_more_streams_than_shown_are_counted(tmp_path: Path) -> None:
    moved = [{**WARMUP, "stream": name} for name in ("python", "numpy", "torch", "megatron:model-parallel-rng")]
    [message] = findings(tmp_path, moved)
    assert message.startswith("4 random streams moved") and "; and 1 more;" in message
    assert "megatron:model-parallel-rng" not in message


def test_a_first_step_that_does_not_continue_the_checkpoint_is_a_finding(tmp_path: Path) -> None:
    [message] = findings(tmp_path, [], step=5)
    assert "the first step after loading the checkpoint of step 2 is step 5, not 3" in message
    assert findings(tmp_path / "from-zero", [], step=1) != []  # the data restarted from sample 0


def test_a_clean_window_is_no_finding(tmp_path: Path) -> None:
    assert findings(tmp_path, []) == []


def test_an_optimizer_whose_counts_are_not_the_checkpoints_is_a_finding(tmp_path: Path) -> None:
    saved = {"steps": [2.0], "loss_scale": 4096.0}
    [message] = findings(tmp_path, [], optimizer={"steps": [], "loss_scale": 65536.0}, saved_optimizer=saved)
    assert message.startswith("the optimizer state at the first step is not the checkpoint's: step counts []")
    assert "loss scale 65536.0, saved with [2.0] and 4096.0" in message
    assert findings(tmp_path / "same", [], optimizer=saved, saved_optimizer=dict(saved)) == []
    assert findings(tmp_path / "unsaved", [], optimizer=saved) == []  # a checkpoint saved without them


def test_a_data_position_that_does_not_continue_the_loads_is_a_finding_naming_what_changed(tmp_path: Path) -> None:
    loaded = {"consumed_samples": 8, "iteration": 2}
    [message] = findings(tmp_path, [], position={"consumed_samples": 0, "iteration": 2}, restored_position=loaded)
    assert message.startswith("the data position at the first step is not the one the checkpoint load left")
    assert "(consumed_samples 8 → 0):" in message  # only what changed
    twice = {"consumed_samples": 16, "iteration": 2}  # the offset applied twice
    assert findings(tmp_path / "twice", [], position=twice, restored_position=loaded) != []
    assert findings(tmp_path / "same", [], position=dict(loaded), restored_position=loaded) == []
    assert findings(tmp_path / "unread", []) == []  # a caller that does not read the position


def test_each_divergence_of_one_record_is_said_in_its_one_finding(tmp_path: Path) -> None:
    loaded = {"consumed_samples": 8, "iteration": 2}
    [message] = findings(tmp_path, [WARMUP], position={"consumed_samples": 0, "iteration": 2}, restored_position=loaded)
    assert message.startswith("1 random stream moved") and "; and the data position at the first step" in message


def test_a_data_generator_drawn_before_the_first_step_is_a_finding_naming_it_with_the_data_fix(
    tmp_path: Path,
) -> None:
    drawn = {
        "stream": "data:loader.generator",
        "restored": "bf5f",
        "found": "bf5f",  # drawn before the loop gave it: the hash agrees, the draw was seen
        "caller": "train.py:40 in build (torch.Tensor.random_)",
    }
    [message] = findings(tmp_path, [drawn], data={"data:loader.generator": "bf5f"})
    assert "data:loader.generator by train.py:40 in build (torch.Tensor.random_)" in message
    assert "create the data iterator before the load" in message
    [global_only] = findings(tmp_path / "global", [WARMUP])
    assert "data iterator" not in global_only
