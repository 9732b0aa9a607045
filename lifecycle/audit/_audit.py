"""Run the audit over some inputs: stream every line into its rank's RankAudit, then cross-rank rules."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import operator
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

import orjson

from lifecycle.audit._cross import cross_rank
from lifecycle.audit._handlers import TABLES
from lifecycle.audit._rank import _SUFFIX, RankAudit
from lifecycle.audit._reader import STDIN, Lines, discover, open_source
from lifecycle.audit._records import Finding, unreadable
from lifecycle.audit._rules import enabled
from lifecycle.errors import LogUnreadable
from lifecycle.log import GENESIS

EXIT_CLEAN, EXIT_VIOLATION, EXIT_UNREADABLE = 0, 1, 2
PARALLEL_FROM = 256
MAX_LOGS_PER_INPUT = 1 << 17
_HEAD = operator.itemgetter("event", "ts", "seq", "prev_hash", "hash")
_ENVELOPE = operator.itemgetter("generation", "rank", "run_id", "world_size")


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditResult:
    """Findings (rules enabled by select/ignore), unreadable inputs, and each rank's summary."""

    findings: tuple[Finding, ...]
    errors: tuple[LogUnreadable, ...]
    ranks: tuple[RankAudit, ...]
    sources: int
    records: int

    @property
    def exit_code(self) -> int:
        if self.errors:
            return EXIT_UNREADABLE
        return EXIT_VIOLATION if self.findings else EXIT_CLEAN


def audit(
    paths: Sequence[str], *, select: Iterable[str] = (), ignore: Iterable[str] = (), jobs: int | None = None,
) -> AuditResult:
    """Audit the logs under `paths` (files, directories, or "-" for stdin).

    `jobs` processes read the files (default: one per CPU, up to 8, from PARALLEL_FROM files on);
    the result does not depend on it.
    """
    rules = enabled(select, ignore)
    errors: list[LogUnreadable] = []
    streams: list[RankAudit] = []
    try:
        names = discover(paths)
    except LogUnreadable as exc:
        names, errors = [], [exc]
    workers = _workers(jobs, names)
    if workers > 1:
        try:
            _read_parallel(names, workers, streams, errors)
        except (OSError, BrokenProcessPool):  # no processes to be had here: read them all ourselves
            streams.clear()
            errors.clear()
            workers = 1
    if workers == 1:
        for name in names:
            _read_source(name, streams, errors)
    findings = [f for s in streams for f in s.findings()] + cross_rank(streams)
    kept = tuple(sorted((f for f in findings if f.rule in rules), key=_order))
    return AuditResult(findings=kept, errors=tuple(errors), ranks=tuple(streams), sources=len(names),
                       records=sum(s.records for s in streams))


def _workers(jobs: int | None, names: Sequence[str]) -> int:
    if STDIN in names:
        return 1
    if jobs is None:
        jobs = min(_cpus(), 8) if len(names) >= PARALLEL_FROM else 1
    return max(1, min(jobs, len(names)))


def _cpus() -> int:
    """CPUs this process may run on (a container's share, not the host's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _read_files(names: Sequence[str]) -> tuple[list[RankAudit], list[LogUnreadable]]:
    streams: list[RankAudit] = []
    errors: list[LogUnreadable] = []
    for name in names:
        _read_source(name, streams, errors)
    return streams, errors


def _read_parallel(names: Sequence[str], workers: int, streams: list[RankAudit],
                   errors: list[LogUnreadable]) -> None:
    """Files split into contiguous chunks, read by this process and `workers - 1` others; results
    kept in input order. This process reads its share itself rather than wait idle."""
    chunks = workers * 4
    size = -(-len(names) // chunks)
    parts = [names[i:i + size] for i in range(0, len(names), size)]
    own = len(parts) // workers
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    with ProcessPoolExecutor(max_workers=workers - 1, mp_context=mp.get_context(method)) as pool:
        others = [pool.submit(_read_files, part) for part in parts[own:]]
        mine = [_read_files(part) for part in parts[:own]]
        for part_streams, part_errors in [*mine, *(f.result() for f in others)]:
            streams.extend(part_streams)
            errors.extend(part_errors)


def _order(finding: Finding) -> tuple[Any, ...]:
    return (finding.rule, finding.run_id or "", -1 if finding.rank is None else finding.rank,
            finding.source or "", finding.line or 0)


def _read_source(name: str, streams: list[RankAudit], errors: list[LogUnreadable]) -> None:
    shown = name
    mine: list[RankAudit] = []
    try:
        shown, handle = open_source(name)
        try:
            _feed_lines(shown, handle, mine)
        finally:
            if name != STDIN:
                handle.close()
    except LogUnreadable as exc:
        errors.append(exc)
    except OSError as exc:
        errors.append(unreadable(shown, None, f"cannot read: {exc.strerror or exc}"))
    for stream in mine:
        stream.finish()
    streams.extend(mine)


def _feed_lines(name: str, handle: Any, mine: list[RankAudit]) -> None:
    """Parse each line and feed it to its rank. Hot loop: a record that continues the current
    rank's chain with the same envelope and whose bytes hash to its `hash` as the writer laid them
    out (sorted-keys body, then `,"hash":"<hex>"}`) is checked here on locals, and only records
    with a handler reach the RankAudit; everything else goes through `feed`, which re-checks it
    in full (re-serializing for the hash)."""
    router = _Router(name, mine)
    reader = Lines(name, handle)
    loads, decode_error, sha256 = orjson.loads, orjson.JSONDecodeError, hashlib.sha256
    head, envelope, suffix = _HEAD, _ENVELOPE, -_SUFFIX
    cur: RankAudit | None = None
    nxt, env, table = -1, (), TABLES[False, False]
    prev: str | None = ""
    ts_last, fast, fast_line = 0.0, 0, 0
    for lineno, line in reader:
        try:
            rec = loads(line)
        except decode_error as exc:
            _sync(cur, nxt, prev, ts_last, fast, fast_line)
            _cut_or_raise(name, lineno, line, reader.cut, cur, exc)
            return
        try:
            event, ts, seq, p, digest = head(rec)
            handler = table[event]
            ok = (seq == nxt and p == prev and type(ts) is float and envelope(rec) == env
                  and sha256(line[:suffix] + b"}").hexdigest() == digest)
        except (KeyError, TypeError):  # a field missing, an unhashable event, not an object
            ok = False
        if ok:
            nxt, prev, ts_last, fast, fast_line = seq + 1, digest, ts, fast + 1, lineno
            if handler is not None and cur is not None:
                cur.line = lineno  # where a finding points; the chain state is synced lazily
                handler(cur, rec, ts)
                table = TABLES[cur.validated, cur.rebind_pending]
            continue
        _sync(cur, nxt, prev, ts_last, fast, fast_line)
        fast = 0
        if type(rec) is not dict:
            raise unreadable(name, lineno, f"a record must be a JSON object, not {type(rec).__name__}")
        if cur is None or rec.get("prev_hash") != cur.prev:
            cur = router.switch(cur, rec)
        cur.feed(rec, line, lineno)
        nxt, prev, env, table = cur.next_seq, cur.prev, cur.envelope, cur.handlers
    _sync(cur, nxt, prev, ts_last, fast, fast_line)


def _sync(cur: RankAudit | None, nxt: int, prev: Any, ts: float, fast: int, line: int) -> None:
    """Write the hot loop's locals back to the rank after `fast` records went through it."""
    if cur is not None and fast:
        cur.next_seq, cur.prev, cur.last_ts, cur.line = nxt, prev, ts, line
        cur.records += fast
        cur.handlers = TABLES[cur.validated, cur.rebind_pending]


def _cut_or_raise(name: str, lineno: int, line: bytes, cut: int, cur: RankAudit | None,
                  exc: orjson.JSONDecodeError) -> None:
    if lineno == cut and cur is not None:
        cur.flag("LA009", f"the last line ({len(line)} bytes) is cut off: the writer died mid-record",
                 line=lineno)
        return
    raise unreadable(name, lineno, f"not a JSON record ({_reason(exc)})") from None


def _reason(exc: orjson.JSONDecodeError) -> str:
    return str(exc).split(":")[0][:80]


class _Router:
    """Which rank stream a record belongs to when it does not continue the current one: the stream
    whose last hash is its prev_hash, else the one with its (run_id, rank), else a new one. Lets
    stdin carry many ranks' logs, concatenated or interleaved."""

    __slots__ = ("by_key", "name", "streams", "tails")

    def __init__(self, name: str, streams: list[RankAudit]) -> None:
        self.name = name
        self.streams = streams
        self.tails: dict[str, RankAudit] = {}
        self.by_key: dict[tuple[Any, Any], RankAudit] = {}

    def switch(self, current: RankAudit | None, rec: dict[str, Any]) -> RankAudit:
        if current is not None and current.prev is not None and current.records:
            self.tails[current.prev] = current
        prev = rec.get("prev_hash")
        fresh = prev == GENESIS and rec.get("seq") == 0
        stream = None if fresh or type(prev) is not str else self.tails.pop(prev, None)
        if stream is not None:
            return stream
        key = (rec.get("run_id"), rec.get("rank"))
        stream = None if fresh else self.by_key.get(key)
        if stream is None:
            if len(self.streams) >= MAX_LOGS_PER_INPUT:
                raise unreadable(self.name, None, f"more than {MAX_LOGS_PER_INPUT} logs start in this one input "
                                 "(records with seq 0): this is not one run's startup logs")
            stream = RankAudit(self.name)
            self.streams.append(stream)
            self.by_key[key] = stream
        elif stream.prev is not None:
            self.tails.pop(stream.prev, None)
        return stream

