"""What the audit reports: findings, per-rank timing segments, unreadable-input errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from lifecycle.errors import LogUnreadable


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One rule violation, located at the first record that shows it."""

    rule: str
    message: str
    run_id: str | None = None
    rank: int | None = None
    source: str | None = None
    line: int | None = None
    count: int = 1

    @property
    def where(self) -> str:
        if self.source is None:
            return f"run {self.run_id}" if self.run_id else "-"
        return f"{self.source}:{self.line}" if self.line is not None else self.source


class Segment(NamedTuple):
    """The entry work of one state on one rank: from `transition_started` to `transition_completed`.
    A NamedTuple, not a dataclass: thousands per audit are made in the hot loop and sent between
    processes."""

    state: str
    trigger: str
    start: float
    end: float
    generation: int

    @property
    def duration(self) -> float:
        return self.end - self.start


def unreadable(source: str, line: int | None, reason: str) -> LogUnreadable:
    where = source if line is None else f"{source}:{line}"
    return LogUnreadable(f"{where}: {reason}", source=source, line=line, reason=reason)
