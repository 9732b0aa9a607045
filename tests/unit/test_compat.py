"""Every megatron-core version branch answers by release, read from metadata (no megatron import)."""

from __future__ import annotations

import pytest

from lifecycle.core_entry import compat


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("0.19.2", (0, 19, 2)), ("0.15.3", (0, 15, 3)), ("0.17.0rc1", (0, 17, 0)), ("0.18.1+cu12.9", (0, 18, 1))],
)
def test_versions_are_compared_as_numbers(text: str, parsed: tuple[int, ...]) -> None:
    assert compat.parse_version(text) == parsed


@pytest.mark.parametrize(
    ("release", "library", "eod_in_vocab"),
    [
        ((0, 15, 3), "null", False),
        ((0, 16, 1), "null", False),
        ((0, 17, 0), "null-text", False),
        ((0, 18, 0), "null-text", True),
        ((0, 19, 2), "null-text", True),
    ],
)
def test_the_null_tokenizer_follows_each_release(release: tuple[int, ...], library: str, eod_in_vocab: bool) -> None:
    assert compat.null_tokenizer_library(release) == library
    assert compat.null_tokenizer_eod_in_vocab(release) is eod_in_vocab


def test_the_installed_release_lies_in_the_declared_range() -> None:
    assert compat.FLOOR <= compat.megatron_core_version() < compat.CEILING


def test_the_declared_range_is_pyprojects() -> None:
    from pathlib import Path

    import tomllib

    deps = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["dependencies"]
    floor = ".".join(map(str, compat.FLOOR))
    ceiling = ".".join(map(str, compat.CEILING))
    assert f"megatron-core>={floor},<{ceiling}" in deps


def test_the_model_parallel_config_mend_applies_to_015_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    module = types.ModuleType("megatron.core.model_parallel_config")
    monkeypatch.setattr(compat, "megatron_core_version", lambda: (0, 19, 2))
    compat.mend_model_parallel_config(module)
    assert "warnings" not in module.__dict__
    monkeypatch.setattr(compat, "megatron_core_version", lambda: (0, 15, 3))
    compat.mend_model_parallel_config(module)
    import warnings

    assert module.__dict__["warnings"] is warnings


@pytest.mark.parametrize(
    ("release", "hybrid"),
    [
        ((0, 15, 3), False),
        ((0, 18, 2), False),
        ((0, 19, 0), True),
        ((0, 19, 2), True),
    ],
)
def test_the_default_model_is_hybrid_where_gptmodel_is_deprecated(release: tuple[int, ...], hybrid: bool) -> None:
    assert compat.gpt_model_deprecated(release) is hybrid


@pytest.mark.parametrize("release", [(0, 15, 3), (0, 18, 2)])
def test_no_gpt_checkpoint_translator_before_the_release_that_deprecates_gptmodel(release: tuple[int, ...]) -> None:
    """Before 0.19 `_interop` refuses a GPTModel checkpoint for a HybridModel rather than import a
    module megatron-core does not ship (without importing megatron here)."""
    assert compat.gpt_checkpoint_interop(release) is None
