"""Config decisions the failure paths rely on, pinned down for scripts/mutation: normalization records
(what a `config_normalized` record carries) and the checkpoint layout. Pure, no torch."""

from __future__ import annotations

import dataclasses

import pytest

from lifecycle import RunConfig
from lifecycle.config import normalize
from lifecycle.testing import Normalization


def _config(*overrides: str) -> RunConfig:
    return RunConfig.preset("tiny-gpt", list(overrides))


def test_a_normalization_record_is_frozen_and_built_with_keywords_only() -> None:
    _, [rewrite] = normalize(_config("parallel.pp=2", "parallel.vpp=1"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        rewrite.used = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        Normalization("parallel.vpp", 1, None, "why")  # type: ignore[misc]
