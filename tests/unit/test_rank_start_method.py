"""`start_method`: how `run_ranks` starts its ranks, chosen by the machine or by LIFECYCLE_RANKS_START."""

from __future__ import annotations

from pathlib import Path

import pytest

from lifecycle.errors import ConfigError
from lifecycle.launchers import local


def test_without_an_accelerator_device_ranks_are_forked_from_the_preloaded_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(local, "ACCELERATOR_DEVICES", (str(tmp_path / "nvidiactl"), str(tmp_path / "kfd")))
    assert local.start_method({}) == "forkserver"


@pytest.mark.parametrize("device", ["nvidiactl", "kfd"])
def test_where_an_accelerator_device_exists_ranks_are_spawned(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, device: str
) -> None:
    (tmp_path / device).touch()
    monkeypatch.setattr(local, "ACCELERATOR_DEVICES", (str(tmp_path / "nvidiactl"), str(tmp_path / "kfd")))
    assert local.start_method({}) == "spawn"


@pytest.mark.parametrize("chosen", ["spawn", "forkserver"])
def test_the_variable_chooses_over_the_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, chosen: str) -> None:
    (tmp_path / "nvidiactl").touch()
    monkeypatch.setattr(local, "ACCELERATOR_DEVICES", (str(tmp_path / "nvidiactl"),))
    assert local.start_method({"LIFECYCLE_RANKS_START": chosen}) == chosen


def test_another_value_is_refused_in_one_line_naming_the_variable_and_the_fix() -> None:
    with pytest.raises(ConfigError) as refused:
        local.start_method({"LIFECYCLE_RANKS_START": "fork"})
    line = str(refused.value)
    assert "\n" not in line
    assert "LIFECYCLE_RANKS_START='fork'" in line and "forkserver or spawn" in line
    assert refused.value.field == "LIFECYCLE_RANKS_START"
