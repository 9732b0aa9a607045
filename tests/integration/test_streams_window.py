"""The resume window's wrappers in one process (torch and megatron-core imported, no rank started): they
come off as they went on, someone else's patch made meanwhile stays theirs, and the window is checked once
(`lifecycle.resume.streams`)."""

from __future__ import annotations

import importlib

import pytest

from lifecycle.resume.streams import ENTRY_POINTS, ResumeWindow


def _owner(path: str) -> object:
    """The module, or the class in a module, `path` names."""
    head, _, last = path.rpartition(".")
    try:
        return importlib.import_module(path)
    except ImportError:
        return getattr(importlib.import_module(head), last)


def _entry_points() -> dict[tuple[str, str], tuple[bool, object]]:
    """Each entry point: whether its owner holds it itself, and what it holds."""
    out = {}
    for _, path, attrs in ENTRY_POINTS:
        owner = _owner(path)
        for attr in attrs:
            out[(path, attr)] = (attr in vars(owner), getattr(owner, attr, None))
    return out


def test_the_window_leaves_every_entry_point_as_it_found_it() -> None:
    import torch

    _entry_points()  # every owner imported first: importing megatron wraps torch.manual_seed itself
    before = _entry_points()
    window = ResumeWindow.open(3)
    assert window.watched == len(before) and "uniform_" in vars(torch.Tensor)  # wrapped on Tensor itself
    assert torch.rand is not before[("torch", "rand")][1]
    window.close()
    assert window.watched == 0
    assert _entry_points() == before
    assert "uniform_" not in vars(torch.Tensor)  # inherited again, not copied onto Tensor


def test_a_patch_made_while_the_window_was_open_stays_and_the_rest_come_off() -> None:
    import torch

    original_rand, original_randn = torch.rand, torch.randn
    window = ResumeWindow.open(3)

    def mine(*args: object, **kwargs: object) -> object:
        return original_rand(*args, **kwargs)

    torch.rand = mine  # a profiler's or a user's patch, made over the window's wrapper
    try:
        window.close()
        assert torch.rand is mine and torch.randn is original_randn
    finally:
        torch.rand = original_rand


def test_the_window_is_checked_once_and_names_the_first_caller() -> None:
    import torch

    window = ResumeWindow.open(3)
    torch.rand(2)
    torch.rand(2)  # the second draw does not replace the first caller
    checked = window.check(4)
    assert checked is not None and window.watched == 0
    [moved] = [m for m in checked.moved if m["stream"] == "torch"]
    assert moved["caller"].startswith("tests/integration/test_streams_window.py:")
    assert moved["caller"].endswith("in test_the_window_is_checked_once_and_names_the_first_caller (torch.rand)")
    assert window.check(5) is None


@pytest.mark.parametrize("draw", ["generator", "none"])
def test_a_draw_from_a_generator_of_ones_own_moves_no_stream(draw: str) -> None:
    import torch

    window = ResumeWindow.open(3)
    if draw == "generator":
        torch.rand(2, generator=torch.Generator().manual_seed(1))
    checked = window.check(4)
    assert checked is not None and checked.moved == [] and window.callers == {}
