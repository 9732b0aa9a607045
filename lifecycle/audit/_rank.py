"""One rank's log, audited as it streams: hash chain, per-rank rules, a small summary for cross-rank checks.

Memory per rank is bounded: findings keep the first occurrence per rule plus a count, and the
transition sequence and timing segments are capped.
"""

from __future__ import annotations

import hashlib
from typing import Any

from lifecycle.audit import _steps
from lifecycle.audit._handlers import HANDLERS as _HANDLERS
from lifecycle.audit._handlers import TABLES
from lifecycle.audit._records import Finding, Segment, unreadable
from lifecycle.log import GENESIS, events, record_hash
from states import PLAN_TARGETS, Plan, State

_HASH_KEY = b',"hash":"'
_SUFFIX = len(_HASH_KEY) + 64 + 2
_KEY_END = -_SUFFIX + len(_HASH_KEY)
# The writer's suffix: `,"hash":"<64 hex>"}` after the sorted-keys body that was hashed.
_EVENTS = events.ALL
_NUMBER = (float, int)
_DEFAULT_TARGET = PLAN_TARGETS[Plan.TRAINING].name
_sha256 = hashlib.sha256


class RankAudit:
    """Feed it one rank's records in file order (`feed`), then call `finish`."""

    __slots__ = (
        "_findings", "bound_steps", "envelope", "failure", "fingerprint", "first_step_logged", "first_ts",
        "generation", "handlers", "last_ts",
        "line", "model_gen", "model_id", "next_seq", "old_model_id", "open_start", "open_trigger",
        "plan", "prev", "rank", "rebind_line", "rebind_pending", "rebuilt", "records", "run_id",
        "segments", "shut", "simulated", "source", "state", "target", "transitions", "validated", "world_size",
    )

    def __init__(self, source: str) -> None:
        self.source = source
        self.run_id: str | None = None
        self.rank: int | None = None
        self.world_size: int | None = None
        self.generation = 0
        self.next_seq = 0
        self.prev: str | None = GENESIS
        self.records = 0
        self.line = 0
        self.state = State.CONFIGURED.name
        self.plan: str | None = None
        self.target = _DEFAULT_TARGET
        self.validated = False
        self.fingerprint: str | None = None
        self.open_trigger: str | None = None
        self.open_start = 0.0
        self.model_gen = False
        self.model_id: str | None = None
        self.old_model_id: str | None = None
        self.rebind_pending = False
        self.rebuilt = False
        self.rebind_line = 0
        self.bound_steps = 0
        self.first_step_logged = True
        self.shut = False
        self.failure: str | None = None
        self.transitions: list[tuple[str, str]] = []
        self.segments: list[Segment] = []
        self.first_ts: float | None = None
        self.last_ts: float | None = None
        self.envelope: tuple[Any, ...] = ()
        self.handlers = TABLES[False, False]
        self._findings: dict[str, list[Any]] = {}
        self.simulated: int | None = None  # how many ranks a `lifecycle simulate` run drove

    def __getstate__(self) -> dict[str, Any]:
        """For the worker processes: everything but the shared handler table."""
        return {name: getattr(self, name) for name in self.__slots__ if name != "handlers"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value)
        self.handlers = TABLES[self.validated, self.rebind_pending]

    # -- findings ---------------------------------------------------------------------------

    def flag(self, rule: str, message: str, line: int | None = None) -> None:
        held = self._findings.get(rule)
        if held is not None:
            held[1] += 1
            return
        where = self.line if line is None else line
        self._findings[rule] = [
            Finding(rule=rule, message=message, run_id=self.run_id, rank=self.rank,
                    source=self.source, line=where or None),
            1,
        ]

    def findings(self) -> list[Finding]:
        out = []
        for finding, count in self._findings.values():
            out.append(finding if count == 1 else _with_count(finding, count))
        return out

    # -- streaming --------------------------------------------------------------------------

    def feed(self, rec: dict[str, Any], line: bytes, lineno: int) -> None:
        """Audit one parsed record; `line` is its raw bytes without the newline. (The reader's fast
        path in _audit.py does the same for records that continue the chain unchanged.)"""
        self.line = lineno
        event = rec.get("event")
        ts: Any = rec.get("ts")
        rank = rec.get("rank")
        run_id = rec.get("run_id")
        gen = rec.get("generation")
        ws = rec.get("world_size")
        if (type(event) is not str or type(ts) not in _NUMBER or type(rank) is not int
                or type(run_id) is not str or type(gen) is not int or type(ws) is not int):
            raise self._bad_envelope(rec, lineno)
        if self.run_id is None:
            self.run_id = run_id
        self.rank = rank
        self.world_size = ws
        self._chain(rec, line, lineno)
        if self.run_id != run_id:
            self.flag("LA016", f"run_id changes from {self.run_id!r} to {run_id!r} inside one log")
            self.run_id = run_id
        if gen != self.generation:
            self.generation = gen
            self.model_gen = False
        self.envelope = (gen, rank, run_id, ws)
        if self.first_ts is None:
            self.first_ts = ts
        self.last_ts = ts
        self.records += 1
        if event not in _EVENTS:
            raise self._unknown(event, lineno)
        handler = _HANDLERS.get(event)
        if handler is not None:
            handler(self, rec, ts)
        self.handlers = TABLES[self.validated, self.rebind_pending]

    def _unknown(self, event: str, lineno: int) -> Exception:
        return unreadable(self.source, lineno, f"event {event[:60]!r} is not a startup-log event "
                          "(lifecycle/events.py): this is not a megatron-lifecycle log")

    def _chain(self, rec: dict[str, Any], line: bytes, lineno: int) -> None:
        seq = rec.get("seq")
        digest = rec.get("hash")
        prev = rec.get("prev_hash")
        if type(seq) is not int:
            raise unreadable(self.source, lineno, f"field 'seq' is {seq!r}, expected an int")
        if type(digest) is not str or type(prev) is not str:
            self.flag("LA009", "record has no hash chain ('hash'/'prev_hash' missing): not written by AuditLog")
            self.prev = None
        else:
            if seq != self.next_seq:
                self.flag("LA009", self._seq_message(seq))
            elif self.prev is not None and prev != self.prev:
                what = ("first record's prev_hash is not genesis" if seq == 0
                        else "prev_hash does not match the previous record's hash")
                self.flag("LA009", f"{what}: a record was changed, removed or reordered")
            if not _hash_matches(line, rec, digest):
                self.flag("LA009", f"hash of record seq {seq} does not match its content: the record was changed")
            self.prev = digest
        self.next_seq = seq + 1

    def _seq_message(self, seq: int) -> str:
        if self.records == 0:
            return f"log starts at seq {seq}, not 0: its head is missing (truncated)"
        return f"seq {seq} follows seq {self.next_seq - 1}: records were removed, inserted or reordered"

    def _bad_envelope(self, rec: dict[str, Any], lineno: int) -> Exception:
        expected = {"event": "a str", "ts": "a number", "rank": "an int", "run_id": "a str",
                    "generation": "an int", "world_size": "an int"}
        for key, want in expected.items():
            value = rec.get(key)
            ok = {"a str": type(value) is str, "an int": type(value) is int,
                  "a number": type(value) in _NUMBER}[want]
            if not ok:
                shown = repr(value)[:60]
                return unreadable(self.source, lineno, f"field {key!r} is {shown}, expected {want}")
        return unreadable(self.source, lineno, "malformed record")

    # -- end of log ---------------------------------------------------------------------------

    def finish(self) -> None:
        """Rules that need the whole log: died, failed, unfinished rebind."""
        last = self.line
        _steps.close_binding(self)
        if self.rebind_pending and self.rebuilt and self.target == State.CALLBACKS_BOUND.name and self.shut:
            self._flag_no_rebind("shut down")
        if self.failure is not None:
            self.flag("LA013", self.failure, line=last)
        elif self.open_trigger is not None or (
            not self.shut and self.state not in (self.target, State.SHUT_DOWN.name)
        ):
            during = f" during {self.open_trigger!r}" if self.open_trigger else ""
            self.flag("LA010", f"log stops in state {self.state}{during}, before plan {self.plan or '?'}'s "
                      f"target {self.target}, with no failure or shutdown record: the rank died", line=last)

    def _flag_no_rebind(self, what: str) -> None:
        self.flag("LA004", f"the model was rebuilt after line {self.rebind_line} and the rank {what} "
                  "without rebinding callbacks: gradients would not be synchronized")
        self.rebind_pending = False



def _with_count(finding: Finding, count: int) -> Finding:
    return Finding(rule=finding.rule, message=finding.message, run_id=finding.run_id, rank=finding.rank,
                   source=finding.source, line=finding.line, count=count)


def _hash_matches(line: bytes, rec: dict[str, Any], digest: str) -> bool:
    """The writer hashes the sorted-keys JSON and appends `hash` last: hash those bytes directly,
    and fall back to re-serializing (record_hash) for a line formatted any other way."""
    as_written = line[-_SUFFIX:_KEY_END] == _HASH_KEY and line[-2:] == b'"}'
    if as_written and _sha256(line[:-_SUFFIX] + b"}").hexdigest() == digest:
        return True
    try:
        return record_hash(rec) == digest
    except (TypeError, ValueError):  # not serializable back (e.g. integers beyond 64 bits)
        return False

