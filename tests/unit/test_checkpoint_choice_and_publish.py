"""Which checkpoint a run loads and how a save is published, without megatron: the layout's names, the
marker, the refusal VALIDATED makes, the choice between `checkpoint.save` and `checkpoint.load` after
a restart, and the rename that makes a save visible. Pinned down for scripts/mutation
(`config.checkpoints`, `resume.checkpoint`); tests/integration/test_checkpoints.py runs the same on
2 ranks with megatron's dist_checkpointing."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lifecycle import RunConfig
from lifecycle.core_entry.train import save_after_steps
from lifecycle.resume.checkpoint import checkpoint_source
from lifecycle.testing import (
    LATEST,
    checkpoint_problem,
    iteration_dir,
    latest_step,
    load_at_build,
    load_failure_reason,
    partial_dir,
    publish_save,
)


def _saved(directory: Path, step: int, *, complete: bool = True, marker: str | None = None) -> Path:
    final = iteration_dir(directory, step)
    final.mkdir(parents=True)
    if complete:
        (final / "metadata.json").write_text("{}")
    (directory / LATEST).write_text(marker if marker is not None else f"{step}\n")
    return final


def test_a_step_lives_in_iter_and_seven_digits_and_a_save_in_progress_under_a_hidden_name(tmp_path: Path) -> None:
    assert iteration_dir(tmp_path, 3) == tmp_path / "iter_0000003"
    assert iteration_dir(str(tmp_path), 12345678) == tmp_path / "iter_12345678"
    assert partial_dir(tmp_path, 3) == tmp_path / ".iter_0000003.partial"


@pytest.mark.parametrize(
    ("text", "step"),
    [
        ("7\n", 7),
        ("  42  ", 42),
        ("0", 0),
        ("9" * 12, int("9" * 12)),
        ("9" * 13, None),
        ("-1", None),
        ("3.0", None),
        ("", None),
        ("seven", None),
    ],
)
def test_the_marker_names_a_step_only_as_up_to_12_digits(tmp_path: Path, text: str, step: int | None) -> None:
    (tmp_path / LATEST).write_text(text)
    assert latest_step(tmp_path) == step
    assert latest_step(str(tmp_path)) == step


def test_no_directory_no_marker_or_an_unreadable_one_is_no_step(tmp_path: Path) -> None:
    assert latest_step(None) is None and latest_step("") is None
    assert latest_step(tmp_path) is None
    (tmp_path / LATEST).mkdir()
    assert latest_step(tmp_path) is None  # IsADirectoryError
    assert latest_step(f"{tmp_path}/a\0b") is None  # ValueError: embedded null byte
    (tmp_path / "bytes").mkdir()
    (tmp_path / "bytes" / LATEST).write_bytes(b"\xff3")
    assert latest_step(tmp_path / "bytes") is None


def test_validated_refuses_a_load_directory_that_holds_no_complete_checkpoint(tmp_path: Path) -> None:
    assert checkpoint_problem(str(tmp_path / "none")) == "does not exist"
    (tmp_path / "file").write_text("x")
    assert checkpoint_problem(str(tmp_path / "file")) == "is not a directory"
    assert checkpoint_problem(str(tmp_path)) == f"holds no checkpoint ({LATEST} is missing or does not name a step)"
    _saved(tmp_path / "partial", 3, complete=False)
    assert checkpoint_problem(str(tmp_path / "partial")) == (
        f"{LATEST} names step 3, but iter_0000003/ is missing or incomplete"
    )
    (tmp_path / "gone").mkdir()
    (tmp_path / "gone" / LATEST).write_text("5")
    assert checkpoint_problem(str(tmp_path / "gone")) == (
        f"{LATEST} names step 5, but iter_0000005/ is missing or incomplete"
    )
    (iteration_dir(tmp_path / "gone", 5) / "metadata.json").mkdir(parents=True)
    assert checkpoint_problem(str(tmp_path / "gone")) is not None  # a directory is not the marker file
    _saved(tmp_path / "ok", 3)
    assert checkpoint_problem(str(tmp_path / "ok")) is None


def _run(load: str | None = None, save: str | None = None) -> RunConfig:
    overrides = [f"checkpoint.load={load}"] if load else []
    return RunConfig.preset("tiny-gpt", [*overrides, *([f"checkpoint.save={save}"] if save else [])])


@pytest.mark.parametrize("count", ["", "0", "x1", "-1"])
def test_a_fresh_run_loads_checkpoint_load_never_what_an_earlier_run_left_in_checkpoint_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: str
) -> None:
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", count)
    _saved(tmp_path / "save", 4)
    load = str(tmp_path / "load")
    assert checkpoint_source(_run(load, str(tmp_path / "save")), 0) == (load, "checkpoint.load")
    assert checkpoint_source(_run(None, str(tmp_path / "save")), 0) is None
    assert checkpoint_source(_run(), 0) is None


def test_a_restart_resumes_from_its_own_latest_save_else_from_checkpoint_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    save, load = str(tmp_path / "save"), str(tmp_path / "load")
    assert checkpoint_source(_run(load, save), 1) == (load, "checkpoint.load")  # nothing saved yet
    assert checkpoint_source(_run(None, save), 2) is None
    _saved(tmp_path / "save", 4)
    assert checkpoint_source(_run(load, save), 1) == (save, "checkpoint.save")
    assert checkpoint_source(_run(None, save), 3) == (save, "checkpoint.save")
    assert checkpoint_source(_run(load, None), 1) == (load, "checkpoint.load")


@pytest.mark.parametrize("count", ["1", "12"])
def test_a_process_torchrun_restarted_resumes_like_an_in_process_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: str
) -> None:
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", count)
    save, load = str(tmp_path / "save"), str(tmp_path / "load")
    assert checkpoint_source(_run(load, save), 0) == (load, "checkpoint.load")
    _saved(tmp_path / "save", 2)
    assert checkpoint_source(_run(load, save), 0) == (save, "checkpoint.save")


def test_publishing_renames_the_finished_save_into_place_then_points_the_marker_at_it(tmp_path: Path) -> None:
    partial = partial_dir(tmp_path, 3)
    partial.mkdir()
    (partial / "shard").write_text("new")
    publish_save(tmp_path, partial, iteration_dir(tmp_path, 3), 3)
    assert (iteration_dir(tmp_path, 3) / "shard").read_text() == "new"
    assert (tmp_path / LATEST).read_text() == "3\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iter_0000003", LATEST]


def test_saving_a_step_again_replaces_the_old_copy_and_leaves_nothing_aside(tmp_path: Path) -> None:
    _saved(tmp_path, 3)
    (iteration_dir(tmp_path, 3) / "shard").write_text("old")
    (tmp_path / ".iter_0000003.old").mkdir()  # left by an earlier save that died mid-way
    (tmp_path / ".iter_0000003.old" / "x").write_text("stale")
    _saved(tmp_path, 2, marker="2\n")
    partial = partial_dir(tmp_path, 3)
    partial.mkdir()
    (partial / "shard").write_text("new")
    publish_save(tmp_path, partial, iteration_dir(tmp_path, 3), 3)
    assert (iteration_dir(tmp_path, 3) / "shard").read_text() == "new"
    assert not (iteration_dir(tmp_path, 3) / "metadata.json").exists()  # nothing of the old copy
    assert (tmp_path / LATEST).read_text() == "3\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iter_0000002", "iter_0000003", LATEST]


def test_saving_a_step_again_needs_no_copy_left_aside_before(tmp_path: Path) -> None:
    _saved(tmp_path, 3)
    partial = partial_dir(tmp_path, 3)
    partial.mkdir()
    publish_save(tmp_path, partial, iteration_dir(tmp_path, 3), 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iter_0000003", LATEST]
    assert list(iteration_dir(tmp_path, 3).iterdir()) == []  # the new, empty save


class CheckpointFailed(BaseException):
    def __init__(self, failures: dict[int, Any]) -> None:
        super().__init__("failed")
        self.failures = failures


def test_a_load_error_is_described_by_its_first_line_its_file_and_the_ranks_that_failed(tmp_path: Path) -> None:
    failures = {1: (ValueError("v"), "traceback"), 0: KeyError("k"), 2: KeyError("k2")}
    assert (
        load_failure_reason(CheckpointFailed(failures), tmp_path)
        == "CheckpointFailed on ranks [0, 1, 2]: KeyError, ValueError"
    )
    inside = FileNotFoundError(2, "No such file", str(tmp_path / "common.pt"))
    assert load_failure_reason(inside, tmp_path) == f"FileNotFoundError in {tmp_path / 'common.pt'}: {inside}"
    outside = FileNotFoundError(2, "No such file", "/elsewhere/x")
    assert load_failure_reason(outside, tmp_path) == f"FileNotFoundError: {outside}"
    assert load_failure_reason(RuntimeError("first\nsecond"), tmp_path) == "RuntimeError: first"
    assert load_failure_reason(RuntimeError("x" * 400), tmp_path) == "RuntimeError: " + "x" * 300
    assert load_failure_reason(RuntimeError(), tmp_path) == "RuntimeError: "
    numbered = OSError(5, "I/O error")
    numbered.filename = 5  # type: ignore[assignment]
    assert load_failure_reason(numbered, tmp_path) == f"OSError: {numbered}"


def test_fresh_weights_load_nothing_and_a_run_without_save_saves_nothing(tmp_path: Path) -> None:
    emitted: list[Any] = []
    ctx = SimpleNamespace(runtime=SimpleNamespace(config=_run(), generation=0), emit=emitted.append)
    assert load_at_build(ctx, [], None, retarget=lambda *_: None) == 0  # type: ignore[arg-type]
    assert emitted == []
    lc = SimpleNamespace(runtime=SimpleNamespace(config=_run(), model=[object()]))
    assert save_after_steps(lc, 3) is None  # type: ignore[arg-type]
    lc = SimpleNamespace(runtime=SimpleNamespace(config=_run(save=str(tmp_path)), model=None))
    assert save_after_steps(lc, 3) is None  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
