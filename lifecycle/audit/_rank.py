"""One rank's log, audited record by record: hash chain, envelope, clock, per-event rules, and
the rules that need the whole log (died, failed, file name).

The batch reader (`_feed.py`) applies the same checks to runs of records that continue the chain
unchanged and sends every other record here.
"""

from __future__ import annotations

from collections.abc import Mapping

from lifecycle.audit import _steps
from lifecycle.audit._handlers import HANDLERS
from lifecycle.audit._reader import file_rank
from lifecycle.audit._reads import Envelope, envelope
from lifecycle.audit._records import EARLIEST_TS, LATEST_TS, MAX_STEP_BACK_S, Failure, unreadable
from lifecycle.audit._rules import RuleId
from lifecycle.audit._state import RankState
from lifecycle.audit._typed import as_read
from lifecycle.log import JSONValue, events, line_hash_matches
from states import State

_EVENTS = events.ALL
_NUMBER = (float, int)
_ENDED = (State.SHUT_DOWN.name,)


class RankAudit(RankState):
    """Feed it one rank's records in file order (`feed`), then call `finish`."""

    __slots__ = ()

    def feed(self, rec: Mapping[str, JSONValue], line: bytes, lineno: int) -> None:
        """Audit one parsed record; `line` is its raw bytes without the newline. A value that is not
        a JSON object raises AttributeError (it has no fields: the follower says "not a record")."""
        if not isinstance(rec, dict):
            raise AttributeError(f"{type(rec).__name__!r} object has no attribute 'get'")
        self.read(rec, envelope(rec), line, lineno)

    def read(self, rec: Mapping[str, JSONValue], env: Envelope, line: bytes, lineno: int) -> None:
        """`feed`, given the record's envelope (`_reads.envelope`) already read."""
        self.line = lineno
        event, ts, rank, run_id, gen, ws = env.event, env.ts, env.rank, env.run_id, env.generation, env.world_size
        if (
            type(event) is not str
            or (type(ts) is not float and type(ts) is not int)
            or type(rank) is not int
            or type(run_id) is not str
            or type(gen) is not int
            or type(ws) is not int
            or rank < 0
            or ws < 1
        ):
            raise self._bad_envelope(env, lineno)
        self._identity(run_id, rank, ws)
        self._chain(rec, env, line, lineno)
        if self.run_id != run_id:
            self.flag(RuleId.MIXED_RUNS, f"run_id changes from {self.run_id!r} to {run_id!r} inside one log")
            self.run_id = run_id
        if gen != self.generation:
            self.generation = gen
            self.model_gen = False
        self.envelope = (gen, rank, run_id, ws)
        self._clock(ts, env.seq, event)
        self.records += 1
        if event not in _EVENTS:
            raise self._unknown(event, lineno)
        handler = HANDLERS.get(event)
        if handler is not None:
            handler(self, as_read(self.source, lineno, event, rec), ts)

    def begin(self, gen: int, rank: int, run_id: str, ws: int, ts: float) -> None:
        """Start the log with a first record that the batch reader checked: what `feed` would set."""
        self.run_id, self.rank, self.world_size, self.generation = run_id, rank, ws, gen
        self.envelope = (gen, rank, run_id, ws)
        self.first_ts = self.last_ts = ts

    def _identity(self, run_id: str, rank: int, ws: int) -> None:
        if self.run_id is None:
            self.run_id = run_id
        elif self.rank is not None and rank != self.rank:
            self.flag(
                RuleId.FILE_RANK_MISMATCH,
                f"rank changes from {self.rank} to {rank} inside one log: two ranks wrote "
                "to one file, or logs were spliced",
            )
        self.rank = rank
        self.world_size = ws

    def _clock(self, ts: float, seq: JSONValue, event: str) -> None:
        if not EARLIEST_TS <= ts < LATEST_TS:
            self.flag(
                RuleId.IMPOSSIBLE_TIMESTAMP,
                f"record seq {seq} ({event[:40]}) has ts {ts!r}, not between 2000 and 2100 in Unix seconds: "
                "the node's clock was not set, or the log was edited; this rank's times are unreliable",
            )
        if self.last_ts is None:
            self.first_ts = ts
        elif ts < self.last_ts:
            if ts < self.last_ts - MAX_STEP_BACK_S and EARLIEST_TS <= ts < LATEST_TS:
                self.flag(
                    RuleId.IMPOSSIBLE_TIMESTAMP,
                    f"record seq {seq} ({event[:40]}) is {self.last_ts - ts:.6f} s earlier than the record "
                    f"before it, more than the {MAX_STEP_BACK_S:.0f} s a clock adjustment steps back: the clock "
                    "was reset, or the log was edited; this rank's durations are unreliable",
                )
            self.flag(
                RuleId.TIME_WENT_BACKWARDS,
                f"record seq {seq} ({event[:40]}) is {self.last_ts - ts:.6f} s earlier than the "
                "record before it: the clock went backwards (a clock step, or records edited and "
                "re-hashed); this rank's durations are unreliable",
            )
        self.last_ts = ts

    def _unknown(self, event: str, lineno: int) -> Exception:
        return unreadable(
            self.source,
            lineno,
            f"event {event[:60]!r} is not a startup-log event "
            "(lifecycle/events.py): this is not a megatron-lifecycle log",
        )

    def _chain(self, rec: Mapping[str, JSONValue], env: Envelope, line: bytes, lineno: int) -> None:
        seq, digest, prev = env.seq, env.hash, env.prev_hash
        if type(seq) is not int:
            raise unreadable(self.source, lineno, f"field 'seq' is {repr(seq)[:60]}, expected an int")
        if type(digest) is not str or type(prev) is not str:
            self._broken(lineno)
            self.flag(
                RuleId.HASH_CHAIN_BROKEN,
                "record has no hash chain ('hash'/'prev_hash' missing): not written by AuditLog",
            )
            self.prev = None
        else:
            if seq != self.next_seq:
                self._broken(lineno)
                self.flag(RuleId.HASH_CHAIN_BROKEN, self._seq_message(seq))
            elif self.prev is not None and prev != self.prev:
                self._broken(lineno)
                what = (
                    "first record's prev_hash is not genesis"
                    if seq == 0
                    else "prev_hash does not match the previous record's hash"
                )
                self.flag(RuleId.HASH_CHAIN_BROKEN, f"{what}: a record was changed, removed or reordered")
            if not line_hash_matches(line, rec, digest):
                self._broken(lineno)
                self.flag(
                    RuleId.HASH_CHAIN_BROKEN,
                    f"hash of record seq {seq} does not match its content: the record was changed",
                )
            self.prev = digest
        self.next_seq = seq + 1

    def _broken(self, lineno: int) -> None:
        """Keep the first line at which the chain does not verify: the verdict names it (`tampered`)."""
        if self.broken is None:
            self.broken = lineno

    def _seq_message(self, seq: int) -> str:
        if self.records == 0:
            return f"log starts at seq {seq}, not 0: its head is missing (truncated)"
        return f"seq {seq} follows seq {self.next_seq - 1}: records were removed, inserted or reordered"

    def _bad_envelope(self, env: Envelope, lineno: int) -> Exception:
        expected = (
            ("event", env.event, "a str"),
            ("ts", env.ts, "a number"),
            ("rank", env.rank, "an int"),
            ("run_id", env.run_id, "a str"),
            ("generation", env.generation, "an int"),
            ("world_size", env.world_size, "an int"),
        )
        for key, value, want in expected:
            ok = {"a str": type(value) is str, "an int": type(value) is int, "a number": type(value) in _NUMBER}[want]
            if not ok:
                return unreadable(self.source, lineno, f"field {key!r} is {repr(value)[:60]}, expected {want}")
        rank = env.rank
        if type(rank) is int and rank < 0:  # the types held: the value did not
            return unreadable(self.source, lineno, f"field 'rank' is {rank}, expected a rank of 0 or more")
        world = env.world_size
        if type(world) is int and world < 1:
            return unreadable(self.source, lineno, f"field 'world_size' is {world}, expected a world size of 1 or more")
        return unreadable(self.source, lineno, "malformed record")

    def truncated(self, lineno: int, size: int) -> None:
        """The input's last line has no newline and is not a record: the writer died writing it."""
        self.cut = True
        self.flag(
            RuleId.HASH_CHAIN_BROKEN,
            f"the last line ({size} bytes) is truncated: the writer died mid-record",
            line=lineno,
        )

    # -- end of log ---------------------------------------------------------------------------

    def finish(self) -> None:
        """Rules that need the whole log: died, failed, unfinished rebind, file name, unchecked steps."""
        _steps.close_binding(self)
        if self.rebind_pending and self.rebuilt and self.trains is not None and self.shut:
            self.flag_no_rebind("shut down")
        named = (
            None if self.rank is None or self.source.endswith(f"rank-{self.rank:05d}.jsonl") else file_rank(self.source)
        )  # the name's own rank, looked for only when the name is not the usual one
        if named is not None and self.rank is not None and named != self.rank:
            self.flag(
                RuleId.FILE_RANK_MISMATCH,
                f"the file is named for rank {named} but its records are rank {self.rank}: "
                f"a renamed or misplaced log; name it rank-{self.rank:05d}.jsonl, and find rank "
                f"{named}'s own log",
                line=1,
            )
        if self.failure is not None:
            self.flag(RuleId.STARTUP_FAILED, self.failure.message, line=self.failure.line)
        elif self._died():
            message = self._died_message()
            self.failure = Failure(
                kind="died",
                message=message,
                ts=self.last_ts,
                line=self.line,
                state=self.state,
                trigger=self.open_trigger,
            )
            self.flag(RuleId.RANK_DIED, message, line=self.line)
        elif not self.shut and self.state not in _ENDED:
            self.flag(
                RuleId.INCOMPLETE,
                f"log ends in state {self.state} with no shutdown or failure record: the "
                "process ended without shutting the lifecycle down, or is still running",
                line=self.line,
            )

    def _died(self) -> bool:
        return self.open_trigger is not None or (
            not self.shut and self.state != self.target and self.state not in _ENDED
        )

    def _died_message(self) -> str:
        during = f" during {self.open_trigger!r}" if self.open_trigger else ""
        plan = self.plan or "?"
        goal = (
            f", after reaching plan {plan}'s target {self.target}"
            if self.state == self.target
            else f", before plan {plan}'s target {self.target}"
        )
        cut = ", its last line truncated mid-record" if self.cut else ""
        records = ", before its shutdown completed" if self.shut else ", with no failure or shutdown record"
        return f"log stops in state {self.state}{during}{goal}{cut}{records}: the rank died"
