"""Every corpus config is refused at VALIDATED, with every problem named, and nothing done."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from lifecycle import ConfigError, RunConfig
from lifecycle.config import probe_environment, validate
from lifecycle.core_entry import validated
from tests.integration.invalid_configs import CASES, CPU_ENV
from tests.phase_context import RecordingContext

IDS = [c[0] for c in CASES]


def test_the_corpus_has_at_least_thirty_distinct_invalid_configs() -> None:
    assert len(CASES) >= 30
    assert len(set(IDS)) == len(IDS)


def test_the_tiny_gpt_preset_passes_every_check_in_the_reference_environment() -> None:
    assert validate(RunConfig.preset("tiny-gpt"), CPU_ENV) == []


@pytest.mark.parametrize(("name", "overrides", "expected", "env"), CASES, ids=IDS)
def test_each_invalid_config_reports_exactly_its_problems(
    name: str, overrides: list[str], expected: list[tuple[str, str]], env: dict[str, Any]
) -> None:
    config = RunConfig.preset("tiny-gpt", overrides)
    problems = validate(config, dataclasses.replace(CPU_ENV, **env))
    assert sorted((p.check, p.field) for p in problems) == sorted(expected)
    for p in problems:
        assert p.fix and p.message and p.field in str(p)


@pytest.mark.parametrize(("name", "overrides", "expected", "env"), CASES, ids=IDS)
def test_validated_refuses_each_config_naming_every_problem_with_no_side_effect(
    name: str, overrides: list[str], expected: list[tuple[str, str]], env: dict[str, Any]
) -> None:
    config = RunConfig.preset("tiny-gpt", overrides)
    here = validate(config, probe_environment(config))
    intrinsic = validate(config, environment=False)
    ctx = RecordingContext.for_config(config)
    if not here:  # only environment facts of another machine made this config invalid
        pytest.skip("valid on this machine")
    with pytest.raises(ConfigError) as info:
        validated.enter(ctx)
    err = info.value
    assert err.problems == here
    assert all(p in here for p in intrinsic)
    for p in here:
        assert f"{p.field}={p.value!r}" in str(err)
    assert ctx.side_effects == [] and ctx.emitted == [] and ctx.runtime.fingerprint is None


@pytest.mark.parametrize(("name", "overrides", "expected", "env"), CASES, ids=IDS)
def test_the_lifecycle_refuses_each_config_at_validated_and_no_tripwire_fires(
    name: str, overrides: list[str], expected: list[tuple[str, str]], env: dict[str, Any]
) -> None:
    from lifecycle import Lifecycle
    from states import State

    config = RunConfig.preset("tiny-gpt", overrides)
    if not validate(config, probe_environment(config)):
        pytest.skip("valid on this machine")
    lc = Lifecycle(config, tripwires="raise", options={"keep_records": True})
    try:
        with pytest.raises(ConfigError) as info:
            lc.validate()
        assert lc.state is State.FAILED and not lc.runtime.validated
        for field in {f for _, f in expected} & {p.field for p in info.value.problems}:
            assert field in str(info.value)
        logged = [r["event"] for r in lc.records]
        assert "transition_failed" in logged
        assert not {"side_effect", "tripwire_violation", "config_validated"} & set(logged)
    finally:
        lc.shutdown()
