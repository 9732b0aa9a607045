"""`startup.timeout_s`: the deadline of the rendezvous and of each collective state."""

from __future__ import annotations

import pytest

from lifecycle import ConfigError, RunConfig
from lifecycle.config import validate


def test_the_startup_deadline_defaults_to_600_s_and_is_set_like_any_field() -> None:
    assert RunConfig().startup.timeout_s == 600.0
    assert RunConfig.preset("tiny-gpt", ["startup.timeout_s=20"]).startup.timeout_s == 20.0


@pytest.mark.parametrize("value", ["0", "-5", ".nan", ".inf"])
def test_a_deadline_that_is_not_a_positive_finite_number_is_refused_naming_the_field(value: str) -> None:
    problems = validate(RunConfig.preset("tiny-gpt", [f"startup.timeout_s={value}"]), environment=False)
    assert [p.field for p in problems] == ["startup.timeout_s"]
    assert "set startup.timeout_s to a number of seconds > 0" in str(problems[0])


def test_a_misspelt_startup_key_suggests_timeout_s() -> None:
    with pytest.raises(ConfigError, match="did you mean 'startup.timeout_s'"):
        RunConfig.preset("tiny-gpt", ["startup.timeout=20"])


def test_the_deadline_is_part_of_the_fingerprint_every_rank_compares() -> None:
    short = RunConfig.preset("tiny-gpt", ["startup.timeout_s=20"])
    assert short.fingerprint() != RunConfig.preset("tiny-gpt").fingerprint()
