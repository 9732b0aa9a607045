"""Stream one input's lines into its ranks' audits.

Lines come in batches. Each batch is decoded by msgspec into typed records that hold the envelope
(`seq`, `prev_hash`, `hash`, `generation`, `rank`, `run_id`, `world_size`, `ts`, `event`, with their
types checked in C) and only the fields the handlers read (`_reads.READS`), each as the log's
schema types it (`_reads`); a batch that does not decode so (a field of another type, a missing one,
a line that is not JSON or not UTF-8) is parsed with orjson instead, and a parsed record is
converted to the same types before a handler reads it. Each record's hash is computed on its bytes
as the writer laid them out (the sorted-keys body, then `,"hash":"<hex>"}`), and the batch is
checked in C (list comparisons, `map`, `compress`): a run of records that continues its rank's chain
with the same envelope, consecutive `seq`s, matching hashes, known events and a clock that does not
go backwards is applied by calling only the handlers that matter (a run of steps in the training
state is counted, not handled one by one). Every other record — the first of a log, a damaged one,
one of another rank on an interleaved stdin — goes to `RankAudit.feed` as an orjson dict, which
checks it in full (re-serializing it for the hash when its bytes are laid out any other way) and
converts it too.
"""

from __future__ import annotations

import functools
import hashlib
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from itertools import compress, islice
from operator import attrgetter, itemgetter
from typing import Annotated, TypeGuard, Union, cast

import msgspec
import orjson

from lifecycle.audit._breaks import Column, HexDigests, chain_breaks, typed_clean
from lifecycle.audit._handlers import HANDLERS, WANTED
from lifecycle.audit._rank import RankAudit
from lifecycle.audit._reader import Lines
from lifecycle.audit._reads import READ_TYPES, READS, Typed, envelope
from lifecycle.audit._records import EARLIEST_TS, LATEST_TS, unreadable
from lifecycle.audit._typed import as_read
from lifecycle.errors import LogUnreadable
from lifecycle.log import GENESIS, SUFFIX, JSONValue, events, records
from lifecycle.log.schema import read_fields

_NO_HEAD = (None,) * 9
_CUT = -SUFFIX
_EVENTS = events.ALL
_loads, _EMPTY = orjson.loads, hashlib.sha256()
_HASH = Annotated[str, msgspec.Meta(min_length=64, max_length=64)]
_COLUMNS = ("seq", "prev_hash", "hash", "generation", "rank", "run_id", "world_size", "ts")  # `event` after them
_SCHEMA_ENVELOPE = {f.name: f.type for f in msgspec.structs.fields(records.Record)}
_ENVELOPE = tuple(
    (name, _HASH if name in ("prev_hash", "hash") else _SCHEMA_ENVELOPE[name]) for name in _COLUMNS
)  # the schema's envelope types (`records.Record`); a hash is also 64 characters long
_IN_ENVELOPE = frozenset(name for name, _ in _ENVELOPE)
_NAMES = (*(name for name, _ in _ENVELOPE), "event")  # the order of the columns in _records
_TYPED_HEAD = attrgetter(*_NAMES)


Head = tuple[JSONValue, ...]
"""A record's seq, prev_hash, hash, generation, rank, run_id, world_size, ts and event (`_NAMES`)."""
_HEAD = cast("Callable[[JSONValue], Head]", itemgetter(*_NAMES))
"""A parsed record's head; KeyError or TypeError on one that is not an object holding them (the
callers catch both)."""


class _Batch(Typed):
    """A record as the batch path decodes it (`RECORD_TYPES` derive from it): a handler's fields and
    the envelope, which the reader reads as columns (`_TYPED_HEAD`)."""


def _types(more: Mapping[str, tuple[str, ...]]) -> tuple[type[msgspec.Struct], ...]:
    def fields(event: str) -> list[tuple[str, object] | tuple[str, object, None]]:
        names = {*READS.get(event, ()), *more.get(event, ())} - _IN_ENVELOPE
        return sorted([*_ENVELOPE, *read_fields(event, names)])

    return tuple(
        msgspec.defstruct(
            f"Typed_{event}",
            fields(event),
            bases=(_Batch,),
            tag_field="event",
            tag=event,
            namespace={"event": event},
            module=__name__,
            gc=False,
            kw_only=True,
        )
        for event in sorted(_EVENTS)
    )


RECORD_TYPES = _types({})
"""One record type per event, as the batch path decodes it: the envelope, typed (checked in C),
and the fields its handler reads (`READS`), each typed as the schema says (`schema.read_fields`:
checked in C too; None when absent); `event` is its tag. Fields in sorted order, as the writer sorts keys: msgspec
finds each key at the next field."""
decode_typed = msgspec.json.Decoder(Union[RECORD_TYPES]).decode  # noqa: UP007 - a union built at runtime
"""A line as the batch path decodes it: a record of `RECORD_TYPES` (msgspec raises on one that is not)."""
Tap = Callable[[list[bytes], Sequence[JSONValue | Typed]], None]
"""Called with each batch's lines and their records (typed, or orjson dicts) before the audit reads
them: what the export keeps of the records it would otherwise decode again. A plain audit has none.
A tap declares in its `reads` attribute ({event: field names}) the fields it reads, beyond the
handlers', on the records it is given typed (as attributes: None when absent). A tap with an
`applied(start, end)` method is told of each run of records, input lines [start, end), that the
batch path applies at once; every other record is checked on its own (`RankAudit.feed`)."""


@functools.cache
def _decoder(reads: tuple[tuple[str, tuple[str, ...]], ...]) -> Callable[[bytes], list[_Batch]]:
    types = _types(dict(reads)) if reads else RECORD_TYPES
    return msgspec.json.Decoder(list[Union[types]]).decode  # type: ignore[valid-type]  # noqa: UP007 - a union built at runtime


def _tap_decoder(tap: Tap) -> Callable[[bytes], list[_Batch]]:
    reads: Mapping[str, Sequence[str]] = getattr(tap, "reads", {})
    return _decoder(tuple(sorted((event, tuple(sorted(names))) for event, names in reads.items())))


_STEP = events.STEP_COMPLETED


class Feeder:
    """Reads one input: `feed(lines)`; the ranks' audits it found are in `streams`, unfinished."""

    __slots__ = ("applied", "cur", "decode", "name", "router", "streams", "tap")

    def __init__(self, name: str, limit: int, tap: Tap | None = None) -> None:
        self.name = name
        self.streams: list[RankAudit] = []
        self.router = _Router(name, self.streams, limit)
        self.cur: RankAudit | None = None
        self.tap = tap
        self.decode = _decoder(()) if tap is None else _tap_decoder(tap)
        self.applied: Callable[[int, int], object] | None = getattr(tap, "applied", None)

    def feed(self, lines: Lines) -> None:
        for first, batch in lines:
            self._batch(first, batch, lines.cut, lines.ascii)

    def _batch(self, first: int, lines: list[bytes], cut: int, ascii: bool) -> None:
        typed = _typed(lines, self.decode) if ascii else None  # orjson checks UTF-8, msgspec not where it skips
        if typed is not None:
            if self.tap is not None:
                self.tap(lines, typed)
            self._records(first, lines, typed, tuple(zip(*map(_TYPED_HEAD, typed), strict=True)), None, cut)
            return
        recs, error = _parse(lines)
        n = len(recs)
        if n and self.tap is not None:
            self.tap(lines[:n], recs)
        if n:
            try:
                cols = tuple(zip(*map(_HEAD, recs), strict=True))
                heads = None
            except (KeyError, TypeError):  # a record that is not an object, or lacks a field: checked on its own
                heads = _heads(recs)
                cols = tuple(zip(*(h or _NO_HEAD for h in heads), strict=True))
            self._records(first, lines, recs, cols, heads, cut)
        if error is not None:
            self._not_json(first + n, lines[n], cut, error)

    def _records(
        self,
        first: int,
        lines: list[bytes],
        recs: Sequence[JSONValue | _Batch],
        cols: tuple[Column, ...],
        heads: list[Head | None] | None,
        cut: int,
    ) -> None:
        n = len(recs)
        joined = _digests(lines if n == len(lines) else lines[:n])
        digests: Sequence[str]
        if heads is None and type(recs[0]) is not dict and typed_clean(cols, joined):
            digests, breaks = HexDigests(joined), []
        else:
            digests = [joined[k : k + 64] for k in range(0, len(joined), 64)]
            breaks = chain_breaks(cols, digests)
        seqs, prevs, hashes, gens, ranks, runs, sizes, tss, evs = cols
        i = 0
        while i < n:
            head = (
                heads[i]
                if heads is not None
                else (seqs[i], prevs[i], hashes[i], gens[i], ranks[i], runs[i], sizes[i], tss[i], evs[i])
            )
            end = self._run(i, recs[i], head, digests[i], breaks, n)
            if end > i and self.cur is not None:
                if self.applied is not None:
                    self.applied(first + i, first + end)
                _apply(self.cur, first, i, end, recs, cols, digests)
                i = end
            else:
                self._one(first + i, lines[i], recs[i], cut)
                i += 1

    def _run(self, i: int, rec: JSONValue | _Batch, head: Head | None, digest: str, breaks: list[int], n: int) -> int:
        """The end of the run of records from `i` that continue their rank unchanged (or start a log
        as the writer starts one); `i` itself when record `i` must be checked on its own."""
        if head is None:
            return i
        seq, prev, stored, gen, rank, run_id, ws, ts, event = head
        if (
            stored != digest
            or type(seq) is not int
            or type(ts) is not float
            or not EARLIEST_TS <= ts < LATEST_TS
            or type(event) is not str
            or event not in _EVENTS
        ):
            return i
        cur = self.cur
        if cur is None or prev != cur.prev:  # another rank's record (stdin), or a new log
            if (seq != 0 or prev != GENESIS) and (type(prev) is not str or prev not in self.router.tails):
                return i
            cur = self.cur = self.router.switch(cur, prev, seq, run_id, rank)
        if cur.records == 0:
            if (
                seq != 0
                or prev != GENESIS
                or type(gen) is not int
                or type(rank) is not int
                or type(run_id) is not str
                or type(ws) is not int
                or rank < 0
                or ws < 1
            ):
                return i
            cur.begin(gen, rank, run_id, ws, ts)
        elif seq != cur.next_seq or cur.last_ts is None or ts < cur.last_ts or (gen, rank, run_id, ws) != cur.envelope:
            return i
        at = bisect_right(breaks, i)
        return breaks[at] if at < len(breaks) else n

    def _one(self, lineno: int, line: bytes, rec: JSONValue | _Batch, cut: int) -> None:
        if isinstance(rec, _Batch):  # a typed record: checked in full on the whole record, as orjson reads it
            try:
                rec = _loads(line)
            except orjson.JSONDecodeError as error:
                self._not_json(lineno, line, cut, error)
                return
        if type(rec) is not dict:
            raise unreadable(self.name, lineno, f"a record must be a JSON object, not {type(rec).__name__}")
        env, cur = envelope(rec), self.cur
        if cur is None or env.prev_hash != cur.prev:
            cur = self.cur = self.router.switch(cur, env.prev_hash, env.seq, env.run_id, env.rank)
        cur.read(rec, env, line, lineno)

    def _not_json(self, lineno: int, line: bytes, cut: int, error: orjson.JSONDecodeError) -> None:
        if lineno == cut and self.cur is not None:
            self.cur.truncated(lineno, len(line))
            return
        raise unreadable(self.name, lineno, f"not a JSON record ({str(error).split(':')[0][:80]})") from None


def _digests(lines: list[bytes]) -> str:
    """Each line's SHA-256 as the writer computed it (its body without the `hash` field), hex, joined:
    hexed at once (one call, not one per record); a copy of an empty hash costs less than a new one."""
    digests: list[bytes] = []
    append, fresh = digests.append, _EMPTY.copy
    for line in lines:
        h = fresh()
        h.update(line[:_CUT] + b"}")
        append(h.digest())
    return b"".join(digests).hex()


def _apply(
    cur: RankAudit,
    first: int,
    i: int,
    end: int,
    recs: Sequence[JSONValue | _Batch],
    cols: Sequence[Column],
    digests: Sequence[str],
) -> None:
    """Records [i, end) continue `cur` unchanged: call the handlers that matter, then advance it.
    Checked by `_run` and `chain_breaks`: each is a record with an int seq, a float ts, a known event."""
    seqs, tss, evs = (
        cast("tuple[int, ...]", cols[0]),
        cast("tuple[float, ...]", cols[7]),
        cast("tuple[str, ...]", cols[8]),
    )
    try:
        _handle(cur, first, i, end, recs, tss, evs)
    except LogUnreadable:  # a handler refused record cur.line: it and those before it were read
        cur.records += cur.line - first - i + 1
        raise
    last = end - 1
    cur.records += end - i
    cur.next_seq, cur.prev, cur.last_ts, cur.line = seqs[last] + 1, digests[last], tss[last], first + last


def _handle(
    cur: RankAudit,
    first: int,
    i: int,
    end: int,
    recs: Sequence[JSONValue | _Batch],
    tss: Sequence[float],
    evs: Sequence[str],
) -> None:
    if _decoded(recs, i):
        _handle_typed(cur, first, i, end, recs, tss, evs)
    elif _parsed(recs, i):  # parsed by orjson: read as the types the batch path decodes, each record
        read, refused = _as_read(cur.source, first, i, end, recs, evs)
        if refused is not None:  # handle those before the one refused, as if read one by one
            at, error = refused
            _handle_typed(cur, first, i, at, read, tss, evs)
            cur.line = first + at
            raise error
        _handle_typed(cur, first, i, end, read, tss, evs)
    else:
        raise AssertionError("a record of a run is a typed record or a parsed object: it has a head")


def _decoded(recs: Sequence[JSONValue | _Batch], i: int) -> TypeGuard[Sequence[_Batch]]:
    """Whether the batch was decoded typed (`_typed`): its records are all typed, or none is."""
    return isinstance(recs[i], _Batch)


def _parsed(recs: Sequence[JSONValue | _Batch], i: int) -> TypeGuard[Sequence[JSONValue]]:
    """Whether the batch was parsed by orjson (`_parse`): its records are all parsed, or none is."""
    return type(recs[i]) is dict


_UNREAD = Typed()
"""In place of a record no handler reads (`_as_read`): its event has no struct (`READ_TYPES`)."""


def _as_read(
    source: str, first: int, i: int, end: int, recs: Sequence[JSONValue], evs: Sequence[str]
) -> tuple[list[Typed], tuple[int, LogUnreadable] | None]:
    """Parsed records [i, end) with the fields their handlers read as their types (`_typed.as_read`);
    the first that has a field of another type, and why, if one has."""
    out = [_UNREAD] * len(recs)
    for j in compress(range(i, end), map(READ_TYPES.__contains__, islice(evs, i, end))):
        try:
            out[j] = as_read(source, first + j, evs[j], recs[j])
        except LogUnreadable as error:
            return out, (j, error)
    return out, None


def _handle_typed(
    cur: RankAudit, first: int, i: int, end: int, recs: Sequence[Typed], tss: Sequence[float], evs: Sequence[str]
) -> None:
    j = i
    while j < end:
        validated, counting = cur.validated, cur.state == cur.trains and not cur.rebind_pending
        wanted, mark = WANTED[validated, counting], j
        for j in compress(range(j, end), map(wanted.__contains__, islice(evs, j, end))):  # noqa: B020
            if counting:  # the steps before this record (not one itself), counted before its handler reads them
                cur.bound_steps += evs[mark:j].count(_STEP)
            mark = j
            cur.line = first + j
            HANDLERS[evs[j]](cur, recs[j], tss[j])
            if cur.validated is not validated or (cur.state == cur.trains and not cur.rebind_pending) is not counting:
                j += 1  # other events matter now
                break
        else:
            if counting:
                cur.bound_steps += evs[mark:end].count(_STEP)
            j = end


def _typed(lines: list[bytes], decode: Callable[[bytes], list[_Batch]]) -> list[_Batch] | None:
    """The batch decoded as typed records, or None when one line does not decode so (then orjson
    reads the batch and the records are checked as they are). Only for ASCII lines: msgspec does
    not check that the text of a field it skips is UTF-8; orjson does. Decoded as one JSON array (one
    call, not one per line): a line holding more or less than one record gives another count, or text
    that is not an array of records. (Lines that pair up into as many records another way, `{a},{`
    then `b}`, give records whose hashes are not their lines' digests: `_one` reads each such line
    alone, and refuses it.)"""
    try:
        typed = decode(b"[" + b",".join(lines) + b"]")
        return typed if len(typed) == len(lines) else None
    except (msgspec.DecodeError, RecursionError):  # RecursionError: nested deeper than msgspec decodes
        return None


def _parse(lines: list[bytes]) -> tuple[list[JSONValue], orjson.JSONDecodeError | None]:
    """The records parsed, up to the first line that is not JSON, and that line's error."""
    try:
        return list(map(_loads, lines)), None
    except orjson.JSONDecodeError:
        pass
    recs: list[JSONValue] = []
    for line in lines:
        try:
            recs.append(_loads(line))
        except orjson.JSONDecodeError as exc:
            return recs, exc
    raise AssertionError("unreachable: a line failed to parse once and then parsed")


def _heads(recs: list[JSONValue]) -> list[Head | None]:
    """Each record's chain, envelope, ts and event; None for one that is not an object holding them."""
    try:
        return list(map(_HEAD, recs))
    except (KeyError, TypeError):
        pass
    heads: list[Head | None] = []
    for rec in recs:
        try:
            heads.append(_HEAD(rec))
        except (KeyError, TypeError):
            heads.append(None)
    return heads


class _Router:
    """Which rank a record belongs to when it does not continue the current one: the rank whose
    last hash is its prev_hash, else the one with its (run_id, rank), else a new one. Lets stdin
    carry many ranks' logs, concatenated or interleaved."""

    __slots__ = ("by_key", "limit", "name", "streams", "tails")

    def __init__(self, name: str, streams: list[RankAudit], limit: int) -> None:
        self.name = name
        self.streams = streams
        self.limit = limit
        self.tails: dict[str, RankAudit] = {}
        self.by_key: dict[tuple[str, int], RankAudit] = {}

    def switch(
        self, current: RankAudit | None, prev: JSONValue, seq: JSONValue, run_id: JSONValue, rank: JSONValue
    ) -> RankAudit:
        """The rank of a record with this envelope (its `prev_hash`, `seq`, `run_id`, `rank`)."""
        if current is not None and current.prev is not None and current.records:
            self.tails[current.prev] = current
        fresh = prev == GENESIS and seq == 0
        stream = None if fresh or type(prev) is not str else self.tails.pop(prev, None)
        if stream is not None:
            return stream
        key = (run_id, rank) if type(run_id) is str and type(rank) is int else None  # else feed() refuses it
        stream = None if fresh or key is None else self.by_key.get(key)
        if stream is None:
            if len(self.streams) >= self.limit:
                raise unreadable(
                    self.name,
                    None,
                    f"more than {self.limit} logs start in this one input "
                    "(records with seq 0): this is not one run's startup logs",
                )
            stream = RankAudit(self.name)
            self.streams.append(stream)
            if key is not None:
                self.by_key[key] = stream
        elif stream.prev is not None:
            self.tails.pop(stream.prev, None)
        return stream
