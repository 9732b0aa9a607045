"""`Problem`, the one record every check returns, and the `Environment` facts environment checks read."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from lifecycle.config._records import RunConfig

Kind = Literal["intrinsic", "environment"]
TE_EXTRA = "pip install megatron-lifecycle[te]"


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """One thing wrong with a config: which check, which field, the value seen, and the fix."""

    check: str
    field: str
    value: object
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
    env: Mapping[str, str] = field(default_factory=dict)
    log_dir_problem: str | None = None
    checkpoint_problem: str | None = None


Check = Callable[[RunConfig], list[Problem]]
EnvCheck = Callable[[RunConfig, Environment], list[Problem]]


def intrinsic(check: str, field: str, value: object, message: str, fix: str) -> Problem:
    return Problem(check=check, field=field, value=value, message=message, fix=fix)


def environment(check: str, field: str, value: object, message: str, fix: str) -> Problem:
    return Problem(check=check, field=field, value=value, message=message, fix=fix, kind="environment")
