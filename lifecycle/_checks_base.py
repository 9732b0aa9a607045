"""Problem constructors shared by the check modules."""

from __future__ import annotations

from typing import Any

from lifecycle.validation import Problem


def intrinsic(check: str, field: str, value: Any, message: str, fix: str) -> Problem:
    return Problem(check=check, field=field, value=value, message=message, fix=fix)


def environment(check: str, field: str, value: Any, message: str, fix: str) -> Problem:
    return Problem(
        check=check, field=field, value=value, message=message, fix=fix, kind="environment"
    )
