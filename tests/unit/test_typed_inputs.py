"""Typed inputs: path flags are paths (never YAML), `--set` goes through one strict parser, every
numeric field has bounds that validation checks, local paths are local, `audit --jobs` is >= 1."""

from __future__ import annotations

import dataclasses
import math
import typing
from pathlib import Path
from typing import Any

import pytest

from lifecycle import RunConfig
from lifecycle.cli import load, main
from lifecycle.config import BOUNDS, validate
from lifecycle.testing import LOCAL_PATHS


def loaded(*argv: str) -> RunConfig:
    """The RunConfig `lifecycle run ARGV` would start from (the real parser, no launch)."""
    import argparse

    from lifecycle.cli import run as run_cli

    parser = argparse.ArgumentParser()
    run_cli.register(parser.add_subparsers())
    return load(parser.parse_args(["run", *argv]))


@pytest.mark.parametrize("path", ["runs/x #1", "~", "null", "yes", "1e3", "a: b", "[x]", "&anchor", "{x}", " spaced "])
def test_log_dir_is_the_path_as_typed(path: str) -> None:
    assert loaded("--log-dir", path).logging.log_dir == path


@pytest.mark.parametrize("path", ["runs/x #1", "~", "yes", "1e3", "{x}"])
def test_a_string_field_set_with_set_is_the_text_as_written(path: str) -> None:
    assert loaded("--set", f"checkpoint.save={path}").checkpoint.save == path


def test_config_is_a_path_and_a_yaml_with_a_key_twice_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    odd = tmp_path / "my config #1.yaml"
    odd.write_text("training:\n  steps: 3\n")
    assert loaded("--config", str(odd)).training.steps == 3
    odd.write_text("training:\n  steps: 3\n  steps: 4\n")
    assert main(["run", "--config", str(odd)]) == 2
    err = capsys.readouterr().err
    assert "'steps' is given twice" in err and "line 2" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("training.steps=1\n2", "override training.steps: the value holds a line break"),
        ("checkpoint.save=/a\r/b", "override checkpoint.save: the value holds a line break"),
        ("model=[unclosed", "override model: the value is not valid YAML"),
        ("training.seed=99999999999", "training.seed=99999999999: out of range"),
        ("training.steps=18446744073709551616", "training.steps=18446744073709551616: out of range"),
        ("optimizer.lr=inf", "optimizer.lr=inf: out of range"),
        ("optimizer.weight_decay=.nan", "optimizer.weight_decay=nan"),
        ("startup.timeout_s=1e300", "startup.timeout_s=1e+300: out of range"),
        (
            "checkpoint.save=https://alice:PASS1111@host/ckpt",
            "checkpoint.save='https://<redacted>@host/ckpt': is a URL",
        ),
        ("checkpoint.load=s3://bucket/ckpt", "checkpoint.load='s3://bucket/ckpt': is a URL"),
        ("logging.log_dir=gs://b/logs", "logging.log_dir='gs://b/logs': is a URL"),
    ],
)
def test_bad_set_values_exit_2_in_one_line_naming_the_field(
    value: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--set", value]) == 2
    err = capsys.readouterr().err
    assert expected in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and "PASS1111" not in err


def test_a_key_given_twice_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--set", "training.steps=1", "--set", "training.steps=2"]) == 2
    err = capsys.readouterr().err
    assert "override training.steps is given twice ('1', then '2')" in err and len(err.strip().splitlines()) == 1


def numeric_fields() -> list[tuple[str, Any]]:
    out = []
    for section, hint in typing.get_type_hints(RunConfig).items():
        if not dataclasses.is_dataclass(hint):
            continue
        for name, field_hint in typing.get_type_hints(hint).items():
            options = typing.get_args(field_hint) or (field_hint,)
            if int in options or float in options:
                out.append((f"{section}.{name}", float if float in options else int))
    return out


NUMERIC = numeric_fields()


def test_every_numeric_field_has_bounds() -> None:
    assert sorted(name for name, _ in NUMERIC) == sorted(BOUNDS)


def extremes(kind: Any, lo: float, hi: float) -> list[Any]:
    ints = [-(1 << 63), -(1 << 64), (1 << 63), (1 << 64), 10**30, int(lo) - 1, int(hi) + 1]
    if kind is int:
        return [v for v in ints if not lo <= v <= hi]
    floats = [math.inf, -math.inf, math.nan, 1e308, -1e308, lo - abs(lo) - 1e-9, hi * 2 + 1]
    return [v for v in ints + floats if not lo <= v <= hi]


@pytest.mark.parametrize(("name", "kind"), NUMERIC, ids=[n for n, _ in NUMERIC])
def test_every_extreme_value_of_every_numeric_field_is_refused_by_validation_naming_it(name: str, kind: Any) -> None:
    lo, hi = BOUNDS[name]
    section, _, key = name.partition(".")
    for value in extremes(kind, lo, hi):
        config = RunConfig.from_dict({section: {key: value}})
        assert name in {p.field for p in validate(config, environment=False)}, f"{name}={value!r} passed"


@pytest.mark.parametrize(("name", "kind"), NUMERIC, ids=[n for n, _ in NUMERIC])
def test_the_bounds_themselves_pass_the_bounds_check(name: str, kind: Any) -> None:
    section, _, key = name.partition(".")
    for value in BOUNDS[name]:
        config = RunConfig.from_dict({section: {key: kind(value)}})
        assert not [p for p in validate(config, environment=False) if p.check == "bounds"]
        config.fingerprint()  # what the log and the audit serialize: never too large


@pytest.mark.parametrize("name", LOCAL_PATHS)
def test_a_url_where_a_local_path_is_expected_is_refused_naming_the_field(name: str) -> None:
    section, _, key = name.partition(".")
    config = RunConfig.from_dict({section: {key: "https://host/x"}})
    assert [p.field for p in validate(config, environment=False) if p.check == "local_paths"] == [name]


@pytest.mark.parametrize("jobs", ["-3", "0", "two"])
def test_audit_jobs_below_one_exits_2_in_one_line(
    jobs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["audit", "--jobs", jobs, str(tmp_path)])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "--jobs" in err and len(err.strip().splitlines()) == 1
