"""Validate a RunConfig: every problem at once, each naming the field, the value and the fix.

Two kinds of checks, kept apart:

- *intrinsic* checks (`_intrinsic`, `_intrinsic_values`) look only at the config (divisibility,
  dtype and vocab settings, ...);
- *environment* checks (`_environment`) look at this machine (CUDA, optional packages, paths,
  launcher variables).

`validate(config, environment=False)` runs the intrinsic checks only (what offline tools such as a
checkpoint conversion use). `validate(config, environment=True)` probes the machine once into an
`Environment` record and runs both; pass an `Environment` to validate against given facts instead.
Both are pure functions of their inputs: nothing is created, imported or initialized.
The checks are listed in docs/validation.md.
"""

from __future__ import annotations

from collections.abc import Sequence

from lifecycle.config._bounds import check_bounds, check_local_paths, check_otel
from lifecycle.config._environment import ENVIRONMENT, probe_environment
from lifecycle.config._intrinsic import INTRINSIC as _LAYOUT_AND_VALUES
from lifecycle.config._problems import Environment, Kind, Problem
from lifecycle.config._records import RunConfig
from lifecycle.errors import ConfigError

INTRINSIC = (*_LAYOUT_AND_VALUES, check_bounds, check_local_paths, check_otel)


def validate(config: RunConfig, environment: bool | Environment = True) -> list[Problem]:
    """Every problem found, intrinsic first. Empty when the config is valid."""
    problems = [p for check in INTRINSIC for p in check(config)]
    if environment is False:
        return problems
    env = probe_environment(config) if environment is True else environment
    problems += [p for check in ENVIRONMENT for p in check(config, env)]
    return problems


def check_names() -> list[tuple[str, Kind]]:
    """(check id, kind) for every check, in the order they run (docs/validation.md lists them)."""
    return [(c.__name__.removeprefix("check_"), "intrinsic") for c in INTRINSIC] + [
        (c.__name__.removeprefix("check_"), "environment") for c in ENVIRONMENT
    ]


def raise_for(problems: Sequence[Problem]) -> None:
    """Raise one ConfigError listing every problem; do nothing when there are none."""
    if not problems:
        return
    lines = "\n  - ".join(str(p) for p in problems)
    raise ConfigError(
        f"the config has {len(problems)} problem(s):\n  - {lines}",
        field=problems[0].field,
        fields=[p.field for p in problems],
        problems=list(problems),
    )
