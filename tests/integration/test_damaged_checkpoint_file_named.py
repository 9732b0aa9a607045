"""Which index file of a checkpoint that cannot be loaded is named as the damaged one (`damaged_file`:
metadata.json as JSON, torch's `.metadata` and `common.pt` as pickles), on real torch and without
megatron. Pinned down for scripts/mutation (`resume.checkpoint`); the corrupt-checkpoint test of
tests/integration/test_checkpoints.py runs it end to end on 2 ranks. torch is imported inside the
tests, so that a mutant the unit tests kill never pays for it."""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path

from lifecycle.testing import damaged_file


def _complete(path: Path) -> Path:
    import torch

    path.mkdir()
    (path / "metadata.json").write_text('{"sharded_backend": "torch_dist"}')
    (path / ".metadata").write_bytes(pickle.dumps({"state_dict_metadata": {}}))
    torch.save({"step": 3}, path / "common.pt")
    return path


def test_a_checkpoint_whose_index_files_all_read_back_names_none(tmp_path: Path) -> None:
    assert damaged_file(_complete(tmp_path / "ok")) is None
    assert damaged_file(tmp_path / "empty") is None  # no index file at all: nothing to name


def test_a_megatron_lm_checkpoint_whose_common_state_holds_its_args_is_not_named_damaged(tmp_path: Path) -> None:
    import torch

    path = _complete(tmp_path / "megatron_lm")
    torch.save(
        {"args": argparse.Namespace(lr=1e-3, tensor_model_parallel_size=1), "iteration": 3}, path / "common.pt"
    )  # Megatron-LM keeps its argparse Namespace in the common state
    assert damaged_file(path) is None


def test_the_first_index_file_that_does_not_read_back_is_named(tmp_path: Path) -> None:
    for name, garbage in (
        ("metadata.json", b"{not json"),
        (".metadata", b"\x80\x05garbage"),
        ("common.pt", b"\x00random bytes"),
    ):
        path = _complete(tmp_path / name.strip("."))
        (path / name).write_bytes(garbage)
        assert damaged_file(path) == path / name
    both = _complete(tmp_path / "both")
    (both / ".metadata").write_bytes(b"x")
    (both / "common.pt").write_bytes(b"y")
    assert damaged_file(both) == both / ".metadata"


def test_a_missing_index_file_is_skipped_not_named(tmp_path: Path) -> None:
    path = _complete(tmp_path / "ck")
    (path / "metadata.json").unlink()
    (path / "common.pt").write_bytes(b"y")
    assert damaged_file(path) == path / "common.pt"
