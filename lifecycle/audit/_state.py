"""One rank's audit state: what the per-event handlers read and write, and its findings so far.

Its own module so that the handlers (`_handlers.py`) and the rank's reader (`_rank.py`) both import
it and neither imports the other.
"""

from __future__ import annotations

from lifecycle.audit._records import Failure, Finding, Segment, TimeoutMap
from lifecycle.audit._rules import RuleId
from lifecycle.log import GENESIS
from states import PLAN_TARGETS, STARTUP_ORDER, Plan, State, training_state

_DEFAULT_TARGET = PLAN_TARGETS[Plan.TRAINING].name
TRAINS_AT: dict[str, str] = {s.name: t.name for s in STARTUP_ORDER if (t := training_state(s)) is not None}
"""By target state: the state a rank stopping there trains in (absent: its plan never trains)."""
_CONFIGURED = State.CONFIGURED.name


class RankState:
    """The summary of one rank's log so far. Memory per rank is bounded: findings keep the first
    occurrence per rule plus a count, and the transition sequence and timing segments are capped."""

    __slots__ = (
        "_findings",
        "attempt_no",
        "bound_steps",
        "broken",
        "configured_timeout_s",
        "counts",
        "cut",
        "cycles",
        "envelope",
        "failure",
        "fingerprint",
        "first_step_logged",
        "first_ts",
        "fresh_group",
        "generation",
        "host",
        "last_ts",
        "launched",
        "line",
        "model_gen",
        "model_id",
        "next_seq",
        "old_model_id",
        "open_start",
        "open_trigger",
        "plan",
        "prev",
        "rank",
        "rebind_line",
        "rebind_pending",
        "rebuilt",
        "records",
        "run_id",
        "segments",
        "shut",
        "signalled",
        "simulated",
        "source",
        "state",
        "target",
        "timeouts",
        "trains",
        "transitions",
        "validated",
        "warnings",
        "world_size",
    )

    fresh_group: tuple[int, str, bool] | None
    """The last group made while bound (LA029): (`bound_steps` then, its name and creator, whether this
    rank is outside it)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.run_id: str | None = None
        self.rank: int | None = None
        self.world_size: int | None = None
        self.generation = 0
        self.envelope: tuple[int, int, str, int] | tuple[()] = ()  # (generation, rank, run_id, world_size)
        self.next_seq = 0
        self.prev: str | None = GENESIS
        self.records, self.line = 0, 0
        self.cut = False
        self.broken: int | None = None  # the first line where the hash chain breaks (LA009; not a cut last line)
        self.first_ts: float | None = None
        self.last_ts: float | None = None
        self.state = _CONFIGURED
        self.plan: str | None = None
        self.target = _DEFAULT_TARGET
        self.trains: str | None = TRAINS_AT.get(self.target)  # where steps belong (None: nowhere)
        self.fingerprint: str | None = None
        self.host: str | None = None  # lifecycle_started's
        self.launched = False  # lifecycle_started's `launcher`: `lifecycle run` started the rank
        self.configured_timeout_s: float | None = None  # timeouts_read's
        self.timeouts: TimeoutMap | None = None  # timeouts_read's, in short
        self.open_trigger: str | None = None
        self.open_start = 0.0
        self.model_id: str | None = None
        self.old_model_id: str | None = None
        self.rebind_pending, self.rebuilt, self.rebind_line = False, False, 0
        self.validated, self.model_gen, self.shut = False, False, False
        self.signalled: str | None = None  # the signal a `signal_received` logged (stopped from outside)
        self.bound_steps, self.first_step_logged, self.fresh_group = 0, True, None
        self.failure: Failure | None = None
        self.transitions: list[tuple[str, str]] = []
        self.segments: list[Segment] = []
        self._findings: dict[str, tuple[Finding, int]] = {}  # rule -> (first finding, count)
        self.attempt_no = 0  # the process attempt (torchrun restart) the records now belong to
        self.cycles: dict[tuple[int, int], dict[str, object]] = {}  # (attempt, cycle) -> its records' fields
        self.simulated: int | None = None  # how many ranks a `lifecycle simulate` run drove
        self.warnings: dict[tuple[str, str, str], int] = {}  # (category, module, message) → times logged
        self.counts: dict[str, dict[str, int]] = {}  # per state: process groups, collectives (simulate)

    def flag(self, rule: str, message: str, line: int | None = None) -> None:
        """Record a finding at `line` (default: the current record); later ones of a rule only count."""
        held = self._findings.get(rule)
        if held is not None:
            self._findings[rule] = (held[0], held[1] + 1)
            return
        where = self.line if line is None else line
        self._findings[rule] = (
            Finding(
                rule=rule, message=message, run_id=self.run_id, rank=self.rank, source=self.source, line=where or None
            ),
            1,
        )

    def findings(self) -> list[Finding]:
        out = []
        for finding, count in self._findings.values():
            out.append(finding if count == 1 else _with_count(finding, count))
        return out

    def flag_no_rebind(self, what: str) -> None:
        self.flag(
            RuleId.REBUILD_WITHOUT_REBIND,
            f"the model was rebuilt after line {self.rebind_line} and the rank {what} "
            "without rebinding callbacks: gradients would not be synchronized",
        )
        self.rebind_pending = False

    def fail(self, failure: Failure) -> None:
        """Keep the first failure until the rank recovers (reaches its target again)."""
        if self.failure is None:
            self.failure = failure


def _with_count(finding: Finding, count: int) -> Finding:
    return Finding(
        rule=finding.rule,
        message=finding.message,
        run_id=finding.run_id,
        rank=finding.rank,
        source=finding.source,
        line=finding.line,
        count=count,
    )
