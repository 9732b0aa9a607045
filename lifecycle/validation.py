"""Validate a RunConfig: every problem at once, each naming the field, the value and the fix.

Two kinds of checks, kept apart:

- *intrinsic* checks look only at the config (divisibility, dtype and vocab settings, ...);
- *environment* checks look at this machine (CUDA, optional packages, paths, launcher variables).

`validate(config, environment=False)` runs the intrinsic checks only (what offline tools such as a
checkpoint conversion use). `validate(config, environment=True)` probes the machine once into an
`Environment` record and runs both; pass an `Environment` to validate against given facts instead.
Both are pure functions of their inputs: nothing is created, imported or initialized.
The checks are listed in docs/validation.md.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lifecycle._errors import ConfigError
from lifecycle.config import RunConfig

Kind = Literal["intrinsic", "environment"]
TE_EXTRA = "pip install megatron-lifecycle[te]"
OPTIONAL_MODULES = ("transformer_engine", "torch_memory_saver", "transformers", "tensorboard")


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """One thing wrong with a config: which check, which field, the value seen, and the fix."""

    check: str
    field: str
    value: Any
    message: str
    fix: str
    kind: Kind = "intrinsic"

    def __str__(self) -> str:
        return f"{self.field}={self.value!r}: {self.message}; fix: {self.fix}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Environment:
    """The facts about this machine that environment checks read."""

    cuda: bool = False
    modules: frozenset[str] = frozenset()
    existing_dirs: frozenset[str] = frozenset()
    existing_paths: frozenset[str] = frozenset()
    env: Mapping[str, str] = field(default_factory=dict)
    log_dir_problem: str | None = None


Check = Callable[[RunConfig], list[Problem]]
EnvCheck = Callable[[RunConfig, Environment], list[Problem]]


def probe_environment(config: RunConfig) -> Environment:
    """Read the facts environment checks need (imports torch to ask about CUDA; creates nothing)."""
    import torch

    from lifecycle.auditlog import check_log_dir

    paths = [p for p in (config.tokenizer.path, config.checkpoint.load) if p]
    launcher = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    log_dir = config.logging.log_dir
    return Environment(
        cuda=bool(torch.cuda.is_available()),
        modules=frozenset(m for m in OPTIONAL_MODULES if importlib.util.find_spec(m) is not None),
        existing_dirs=frozenset(p for p in paths if Path(p).is_dir()),
        existing_paths=frozenset(p for p in paths if Path(p).exists()),
        env={k: os.environ[k] for k in launcher if k in os.environ},
        log_dir_problem=check_log_dir(Path(log_dir)) if log_dir else None,
    )


def validate(config: RunConfig, environment: bool | Environment = True) -> list[Problem]:
    """Every problem found, intrinsic first. Empty when the config is valid."""
    from lifecycle import _checks, _env_checks

    problems = [p for check in _checks.INTRINSIC for p in check(config)]
    if environment is False:
        return problems
    env = probe_environment(config) if environment is True else environment
    problems += [p for check in _env_checks.ENVIRONMENT for p in check(config, env)]
    return problems


def check_names() -> list[tuple[str, Kind]]:
    """(check id, kind) for every check, in the order they run (docs/validation.md lists them)."""
    from lifecycle import _checks, _env_checks

    return [(c.__name__.removeprefix("check_"), "intrinsic") for c in _checks.INTRINSIC] + [
        (c.__name__.removeprefix("check_"), "environment") for c in _env_checks.ENVIRONMENT
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


def require_valid(config: RunConfig, environment: bool | Environment = True) -> None:
    """`validate` then `raise_for`: raises ConfigError naming every problem."""
    raise_for(validate(config, environment))
