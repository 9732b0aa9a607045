"""The per-rank startup log: structlog records, hash-chained, one JSON line each, written per record.

Format: docs/log-format.md. Records made before the log directory is validated are kept in memory
and written, unchanged, when `open()` is called. Writing never raises: when the file cannot take a
record (disk full, I/O error) that record and every later one go to stderr as JSON lines, a
`log_write_failed` record says why, and `fault` holds the error for the engine to act on.

Writers construct an event's record type (`lifecycle.log.records`) and `write` it: the record
carries the event's own fields, the writer adds the envelope (see `_schema_base`). Its fields are
written as they are given, a field left UNSET is absent, so the bytes are those `emit(event, **fields)`
wrote. `emit`, the record by name, is kept for tools and tests that write a log by hand: nothing in
the packages calls it (a unit test checks). With `LIFECYCLE_STRICT_RECORDS=1` in the environment when a
log is created (the test suite sets it), `emit` refuses a field that neither its event's type in
`lifecycle.log.schema` nor the envelope declares.

A log takes one record at a time: the rank watch's thread logs `peer_failed` while the main thread may
still be logging its own records, and each record's link in the chain (`seq`, `prev_hash`) and its
place in the file must be the same.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import orjson
import structlog
from structlog.typing import EventDict, WrappedLogger

from lifecycle.log import events
from lifecycle.log._chain import GENESIS
from lifecycle.log._files import ChainEnd, existing_policy_problem, inspect_log, rank_file, removable_ranks
from lifecycle.log._lock import lock_log_dir
from lifecycle.log._redact import may_hold_credentials, redact, redact_text
from lifecycle.log._schema_base import Record, body_fields
from lifecycle.log._schema_faults import LogWriteFailed, WarningRecorded

_NEW = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
_ENVELOPE = frozenset({"event", "ts", "seq", "prev_hash", "run_id", "rank", "world_size", "generation", "cycle"})
STRICT_RECORDS = "LIFECYCLE_STRICT_RECORDS"
"""`1`: every log created since refuses a record field its event's schema lacks (`AuditLog.emit`)."""


def _strict_fields() -> Callable[[str], frozenset[str]]:
    """The schema's `record_fields`, imported only in strict mode: building the schema's tables takes
    about 0.13 s, which no user's process should pay at `import lifecycle`."""
    from lifecycle.log._schema import record_fields

    return record_fields


def fields_written(record: Record) -> tuple[str, dict[str, object]]:
    """`record`'s event and the fields its writer gave (not the envelope's; none left UNSET)."""
    event, names = body_fields(type(record))
    return event, {name: value for name in names if (value := getattr(record, name)) is not msgspec.UNSET}


def _write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is written (a nearly full disk takes part of a write, then raises)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _stderr_fd() -> int:
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by an object without a descriptor
        return 2


class _ChainWriter:
    """structlog's final 'logger': chains, serializes and writes (or buffers) each record."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.seq = 0
        self.prev = GENESIS
        self.pending: list[bytes] = []
        self.records: list[dict[str, object]] = []
        self.keep_records = False
        self.fd: int | None = None
        self.size = 0  # bytes in the file: a record cut short by a full disk is cut off again
        self.to_stderr = False
        self.fault: OSError | None = None
        self.unlogged = 0  # records that went to stderr instead of the file
        self.lost = 0  # records that reached neither
        self.sinks: list[Callable[[bytes], None]] = []  # fed each record's line once it left (AuditLog.add_sink)
        self.sink_faults: list[str] = []

    def chain(self, _logger: WrappedLogger, _name: str, event_dict: EventDict) -> bytes:
        """structlog's processor: stamp the record's time, then chain it (`link`)."""
        event_dict["ts"] = self.clock()
        return self.link(event_dict)

    def link(self, event_dict: EventDict) -> bytes:
        event_dict["seq"] = self.seq
        event_dict["prev_hash"] = self.prev
        body = orjson.dumps(event_dict, option=orjson.OPT_SORT_KEYS, default=str)
        if may_hold_credentials(body):  # rare: a URL, a query, a token shape somewhere in a value
            for key, value in event_dict.items():
                if key not in _ENVELOPE:
                    event_dict[key] = redact(value)
            body = orjson.dumps(event_dict, option=orjson.OPT_SORT_KEYS, default=str)
        digest = hashlib.sha256(body).hexdigest()
        self.seq += 1
        self.prev = digest
        if self.keep_records:
            self.records.append({**event_dict, "hash": digest})
        return body[:-1] + b',"hash":"' + digest.encode() + b'"}\n'

    def msg(self, line: bytes) -> None:
        if self.fd is not None:
            try:
                _write_all(self.fd, line)
                self.size += len(line)
                self.feed(line)
                return
            except OSError as exc:
                with contextlib.suppress(OSError):  # the file then ends at a whole record
                    os.ftruncate(self.fd, self.size)
                self.failed(exc)
        if self.to_stderr:
            self.stderr(line)
            self.feed(line)
        else:
            self.pending.append(line)

    def feed(self, line: bytes) -> None:
        """Give the written record to each sink; a sink that raises is dropped (AuditLog reports it)."""
        for sink in list(self.sinks):
            try:
                sink(line)
            except Exception as exc:  # a sink never stops the log
                self.sinks.remove(sink)
                self.sink_faults.append(f"{type(exc).__name__}: {exc}")

    def failed(self, exc: OSError) -> None:
        """The file cannot take records any more: close it, and send this and later ones to stderr."""
        self.fault = exc
        fd, self.fd = self.fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.to_stderr = True

    def stderr(self, line: bytes) -> None:
        try:
            _write_all(_stderr_fd(), line)
            self.unlogged += 1
        except OSError:
            self.lost += 1

    def rechain(self, seq: int, prev: str, attempt: int) -> None:
        """Give the held records new links after `prev` (a new attempt continuing an existing file)."""
        held = [orjson.loads(line) for line in self.pending]
        if self.keep_records:
            del self.records[len(self.records) - len(held) :]
        self.seq, self.prev = seq, prev
        self.pending = []
        for record in held:
            record.pop("hash", None)
            if record.get("event") == events.LIFECYCLE_STARTED:
                record["attempt"] = attempt
            self.pending.append(self.link(record))


class AuditLog:
    """One rank's startup log. `write(record)`; `open(dir)` once the directory is validated.
    `clock` gives each record's `ts`, seconds since the epoch (`time.time`; a test or a replay tool
    may place records at chosen moments)."""

    def __init__(
        self,
        *,
        run_id: str,
        rank: int,
        world_size: int,
        keep_records: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if rank < 0:  # the audit refuses such a record: never write one
            raise ValueError(f"rank {rank}: a rank is 0 or more")
        if world_size < 1:  # nor one of a world of no rank
            raise ValueError(f"world_size {world_size}: a world holds 1 rank or more")
        self._writer = _ChainWriter(clock)
        self._writer.keep_records = keep_records
        self.run_id = run_id
        self.rank = rank
        self.world_size = world_size
        self.generation = 0
        self.cycle = 0  # the in-process restart cycle (lifecycle.resilience); 0 without one
        self.path: Path | None = None
        self._lock_fd: int | None = None
        self._claimed: Path | None = None
        self._strict = _strict_fields() if os.environ.get(STRICT_RECORDS) == "1" else None  # once per log
        self._emitting = threading.RLock()  # reentrant: a signal handler on the emitting thread may log too
        self._logger = self._make_logger()

    def _make_logger(self) -> structlog.BoundLogger:
        base = structlog.wrap_logger(
            self._writer,
            processors=[self._writer.chain],
            wrapper_class=structlog.BoundLogger,
            cache_logger_on_first_use=True,
        )
        bound: structlog.BoundLogger = base.bind(
            run_id=self.run_id,
            rank=self.rank,
            world_size=self.world_size,
            generation=self.generation,
            cycle=self.cycle,
        )
        return bound

    def rebind(
        self,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        generation: int | None = None,
        cycle: int | None = None,
    ) -> None:
        """Change the per-process context (after distributed init, at a restart, at a new cycle)."""
        if world_size is not None and world_size < 1:
            raise ValueError(f"world_size {world_size}: a world holds 1 rank or more")
        self.rank = self.rank if rank is None else rank
        self.world_size = self.world_size if world_size is None else world_size
        self.generation = self.generation if generation is None else generation
        self.cycle = self.cycle if cycle is None else cycle
        self._logger = self._make_logger()

    def write(self, record: Record) -> None:
        """Log one record, its envelope added (values redacted; a value that is not JSON is written
        as its `str`). Never raises for the file: see `fault`."""
        self._write(*fields_written(record))

    def emit(self, event: str, **fields: object) -> None:
        """Log one record given by name, for a log written by hand (the packages `write` typed
        records). Raises ValueError for an unknown event, and in strict mode (`STRICT_RECORDS`) for an
        unknown field."""
        if event not in events.ALL:
            raise ValueError(f"unknown log event {event!r}: add it to lifecycle/log/events.py")
        if self._strict is not None and (unknown := fields.keys() - self._strict(event)):
            raise ValueError(
                f"log event {event!r} has no field {', '.join(map(repr, sorted(unknown)))}: "
                "add it to lifecycle/log/schema.py"
            )
        self._write(event, fields)

    def _write(self, event: str, fields: dict[str, object]) -> None:
        with self._emitting:
            before = self._writer.fault
            self._logger.msg(event, **fields)
            fault = self._writer.fault
            if before is None and fault is not None:
                failed = LogWriteFailed(
                    path=str(self.path), errno=fault.errno, error=redact_text(str(fault)), failed_event=event
                )
                self._log(failed)
            self._sink_warnings()

    def add_sink(self, sink: Callable[[bytes], None]) -> None:
        """Feed `sink` each record's line (bytes, with its newline) once it is written, the held ones
        at `open`. A sink that raises is dropped, one `warning` record says why, and the log goes on;
        its `close()`, if any, is called by `close`."""
        self._writer.sinks.append(sink)

    def _sink_warnings(self) -> None:
        while self._writer.sink_faults:
            message = redact_text(self._writer.sink_faults.pop(0))[:500]
            self._log(WarningRecorded(category="LogSinkFailed", module="lifecycle.log", message=message, lineno=None))

    def _log(self, record: Record) -> None:
        """Write one of the log's own records (the caller holds `_emitting`, or is `open`)."""
        event, fields = fields_written(record)
        self._logger.msg(event, **fields)

    @property
    def is_open(self) -> bool:
        return self._writer.fd is not None

    @property
    def fault(self) -> OSError | None:
        """The error that stopped the file taking records (they go to stderr since), or None."""
        return self._writer.fault

    @property
    def unlogged(self) -> tuple[int, int]:
        """(records sent to stderr instead of the file, records written nowhere)."""
        return self._writer.unlogged, self._writer.lost

    @property
    def records(self) -> list[dict[str, object]]:
        """Records emitted so far (only when created with keep_records=True)."""
        return self._writer.records

    def claim(self, log_dir: Path, policy: str) -> tuple[str, str] | None:
        """Make `log_dir` this run's (its owner, `LogDir`, found no problem first): create it, share its lock
        with this run's other ranks, and check this rank's file is absent or one of our logs.
        (field, why) when it cannot be had: another run holds the lock, a file is not ours, or
        `policy` (logging.existing) refuses another run's logs. Idempotent for the same directory."""
        if self._claimed == log_dir:
            return None
        self.release()
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
            held = lock_log_dir(log_dir, self.run_id)
        except OSError as exc:
            return "logging.log_dir", f"log_dir {str(log_dir)!r} cannot be used ({exc.strerror})"
        if isinstance(held, str):
            return "logging.log_dir", held
        self._lock_fd = held
        problem = existing_policy_problem(log_dir, self.rank, self.run_id, policy)
        if problem is not None:
            self.release()
            field = "logging.existing" if "another run" in problem else "logging.log_dir"
            return field, problem
        self._claimed = log_dir
        return None

    def release(self) -> None:
        """Give up this rank's share of the log directory's lock."""
        fd, self._lock_fd, self._claimed = self._lock_fd, None, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def open(self, log_dir: Path, *, overwrite: bool = False) -> Path | None:
        """Create (or continue) the rank file and write the held records; None when the file could
        not take them (they went to stderr, and `fault` says why). The directory must already be
        validated and claimed (`claim`; done here when it was not). A non-empty rank file is
        continued as a new attempt: the chain goes on from its last record and `lifecycle_started`
        carries `attempt`. Nothing is opened through a link, and only checked logs are replaced."""
        path = rank_file(log_dir, self.rank)
        try:
            refused = self.claim(log_dir, "overwrite" if overwrite else "append")
            if refused is not None:
                raise PermissionError(refused[1])
            self._writer.fd = self._open_file(path, overwrite=overwrite)
            self._writer.size = os.fstat(self._writer.fd).st_size
        except OSError as exc:
            self._writer.failed(exc)
        self.path = path
        pending, self._writer.pending = self._writer.pending, []
        for line in pending:
            self._writer.msg(line)
        if self._writer.fault is not None:
            self._emit_fault(path)
            return None
        self._sink_warnings()
        return path

    def _open_file(self, path: Path, *, overwrite: bool) -> int:
        end = inspect_log(path)
        if isinstance(end, str):
            raise PermissionError(end)
        unchained = end.unchained_problem(path) if end is not None and not overwrite else None
        if unchained is not None:
            raise PermissionError(unchained)
        if overwrite and self.rank == 0:
            for other in removable_ranks(path.parent, self.world_size):
                other.unlink(missing_ok=True)
        if overwrite and end is not None:
            path.unlink()
            end = None
        if end is None:
            return os.open(path, _NEW, 0o644)
        return self._continue(path, end)

    def _continue(self, path: Path, end: ChainEnd) -> int:
        """Open the checked file `end` describes (the same inode, not a link) to append to it."""
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != end.ident:
            os.close(fd)
            raise PermissionError(f"{path} was replaced while it was being checked: nothing was written to it")
        if end.truncated:  # a last line left half-written by a killed writer
            os.ftruncate(fd, end.complete)
        if end.seq > 0:
            self._writer.rechain(end.seq, end.prev, end.attempts)
        return fd

    def _emit_fault(self, path: Path) -> None:
        fault = self._writer.fault
        assert fault is not None
        if path.is_file() and path.stat().st_size == 0:  # an empty rank file would audit as clean
            path.unlink(missing_ok=True)
        self._log(LogWriteFailed(path=str(path), errno=fault.errno, error=redact_text(str(fault)), failed_event=None))

    def to_stderr(self) -> None:
        """The log directory cannot be used: write the held records, and all later ones, to stderr."""
        self._writer.to_stderr = True
        pending, self._writer.pending = self._writer.pending, []
        for line in pending:
            self._writer.stderr(line)

    def close(self) -> None:
        self.release()
        sinks, self._writer.sinks = self._writer.sinks, []
        for sink in sinks:  # after the last record: a failure here has no record left to go to
            with contextlib.suppress(Exception):
                getattr(sink, "close", lambda: None)()
        fd, self._writer.fd = self._writer.fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError as exc:
                self._writer.fault = self._writer.fault or exc
