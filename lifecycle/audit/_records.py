"""What the audit reports: findings, failures, per-rank timing segments, unreadable-input errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from lifecycle.errors import LogUnreadable

CAUSE_KINDS = ("failed", "died", "timeout")
"""Failures a rank can cause on its own, in the order that breaks a tie between equal timestamps."""
VICTIM_KINDS = ("aborted", "peer_failed", "restart")
"""Failures that happen to a rank because of another one: a signal from the launcher, a peer's error, an
in-process restart wrapper's request (nvidia-resiliency-ext's RankShouldRestart: a peer failed)."""
EXHAUSTED = "exhausted"
"""The failure an in-process restart wrapper's `restarts_exhausted` gives: it names the culprit (`peer`)."""
EARLIEST_TS = 946_684_800.0
"""2000-01-01T00:00:00Z: a record's `ts` before it is impossible (LA022)."""
LATEST_TS = 4_102_444_800.0
"""2100-01-01T00:00:00Z: a record's `ts` from it on is impossible (LA022)."""
MAX_STEP_BACK_S = 60.0
"""A clock step back by more than this within one log is impossible (LA022), not a clock adjustment (LA017)."""


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


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    """The first failure of a rank that it did not recover from.

    `kind` is one of CAUSE_KINDS (`failed`: a transition failed or `fail()` was called; `died`: the
    log stops; `timeout`: a `state_timeout`), VICTIM_KINDS (`aborted`: a `startup_aborted` by a
    signal; `peer_failed`; `restart`: a restart wrapper's request) or EXHAUSTED (the wrapper gave up,
    naming `peer`). `ts` is the record's time; for `died`, the last record's (the rank died
    at or after it). `peer` is the rank a `peer_failed` names, `signal` the signal of an abort.
    """

    kind: str
    message: str
    ts: float | None
    line: int | None
    state: str
    trigger: str | None = None
    peer: int | None = None
    signal: str | None = None
    error_type: str | None = None
    field: str | None = None
    missing: tuple[int, ...] = ()
    """The ranks a `state_timeout` names as never arrived (the culprits of a rendezvous timeout)."""
    peer_lost: bool = False
    """A `peer_failed` that names a rank declared lost (`peer_kind` `lost`): gone or frozen, it writes no
    record of its own after it (the verdict's follower does not wait for one)."""
    new_group: str | None = None
    """A group this rank made after CALLBACKS_BOUND with no step completed since (LA029): a wait that
    fails then is most likely its lazy first collective, which some rank skipped (the verdict reads it)."""
    outside: bool = False
    """This rank is not in `new_group` (its `group_created` says `member: false`): it waits on the ranks in it."""


class TimeoutMap(NamedTuple):
    """A rank's `timeouts_read`, kept small (a NamedTuple a rank): what `lifecycle audit` prints."""

    configured_s: float | None  # None: no `timeouts_read` (the drop-in adopted the script's group)
    world_s: float | None
    store_s: float | None
    watch_s: float | None
    groups: int
    by_timeout: tuple[tuple[float | None, int], ...]  # (seconds, how many groups), longest first
    corrected: tuple[tuple[str, float], ...]  # (group, its timeout before), the first few
    restart: tuple[tuple[str, float | None], ...] = ()  # the in-process restart wrapper's own, by name
    adopted: bool = False  # the world group is the script's (`process_group_adopted`): its timeout too

    def line(self) -> str:
        """One line: the configured timeout, then every timeout read back."""

        def s(value: float | None) -> str:
            return "unread" if value is None else f"{value:g} s"

        counts = ", ".join(f"{s(t)} ×{n}" for t, n in self.by_timeout) or "none"
        fixed = (
            "; set by the lifecycle: " + ", ".join(f"{g} (was {t:g} s)" for g, t in self.corrected)
            if self.corrected
            else ""
        )
        named = (f"{n.removesuffix('_s').replace('_', ' ')} {s(t)}" for n, t in self.restart)  # "store client 300 s"
        restart = "; in-process restart wrapper: " + ", ".join(named) if self.restart else ""
        world = f"world (the script's, adopted) {s(self.world_s)}" if self.adopted else f"world {s(self.world_s)}"
        return (
            f"startup.timeout_s={s(self.configured_s)}; {world}, store {s(self.store_s)}, "
            f"watch {s(self.watch_s)}; {self.groups} groups: {counts}{fixed}{restart}"
        )


class Segment(NamedTuple):
    """The entry work of one state on one rank: from `transition_started` to `transition_completed`.
    A NamedTuple, not a dataclass: thousands per audit are made in the hot loop and sent between
    processes. `end` is never before `start` (a clock that went backwards gives a zero duration)."""

    state: str
    trigger: str
    start: float
    end: float
    generation: int

    @property
    def duration(self) -> float:
        return max(0.0, self.end - self.start)


def unreadable(source: str, line: int | None, reason: str) -> LogUnreadable:
    where = source if line is None else f"{source}:{line}"
    return LogUnreadable(f"{where}: {reason}", source=source, line=line, reason=reason)
