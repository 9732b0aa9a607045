"""`distributed.groups` chooses how DISTRIBUTED creates megatron's process groups: `own` (each rank
its own groups only, the default) or `megatron` (megatron's creation of every group on every rank)."""

from __future__ import annotations

import pytest

from lifecycle import RunConfig
from lifecycle.errors import ConfigError


def test_each_rank_creates_only_its_own_groups_unless_told_otherwise() -> None:
    assert RunConfig.preset("tiny-gpt").distributed.groups == "own"
    assert RunConfig.preset("tiny-gpt", ["distributed.groups=megatron"]).distributed.groups == "megatron"


def test_an_unknown_creation_is_refused_in_one_line_naming_the_field_and_the_choices() -> None:
    with pytest.raises(ConfigError) as refused:
        RunConfig.preset("tiny-gpt", ["distributed.groups=mine"])

    problems = [line for line in str(refused.value).splitlines() if line.strip().startswith("-")]
    assert problems == ["  - distributed.groups: got 'mine'; choose one of 'own', 'megatron'"]


def test_the_creation_is_part_of_the_jobs_fingerprint() -> None:
    own, megatron = RunConfig.preset("tiny-gpt"), RunConfig.preset("tiny-gpt", ["distributed.groups=megatron"])

    assert own.fingerprint() != megatron.fingerprint()  # ranks of one job must agree on it (the audit compares)
