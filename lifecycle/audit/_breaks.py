"""The batch reader's chain checks on whole columns: which records of a batch do not continue the one
before them unchanged (hash, previous hash, consecutive `seq`, one envelope, a clock that does not go
backwards, a timestamp between 2000 and 2100, a known event). `_feed` applies the runs between the
breaks found here; each break goes to `RankAudit.feed`, which checks it in full.

The columns are those of `_feed._records`: seq, prev_hash, hash, generation, rank, run_id,
world_size, ts, event. Each holds any JSON value: `seq` and `ts` are compared as numbers, and a value
that is not one raises TypeError, which `chain_breaks` catches (then it checks record by record).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress, count, islice, repeat
from operator import add, eq, le, ne, not_
from typing import cast, overload

from lifecycle.audit._records import EARLIEST_TS, LATEST_TS
from lifecycle.log import JSONValue, events

_EVENTS = events.ALL
Column = tuple[JSONValue, ...]
"""One field of each record of a batch, in order."""


def _numbers(cols: Sequence[Column]) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The `seq` and `ts` columns, compared as numbers: another value raises TypeError there."""
    return cast("tuple[int, ...]", cols[0]), cast("tuple[float, ...]", cols[7])


def chain_breaks(cols: tuple[Column, ...], digests: list[str]) -> list[int]:
    """Sorted indices j >= 1 whose record does not continue record j - 1 unchanged (or fails its own
    hash or event check). Checked on whole columns: a batch of one log has none; a batch of
    concatenated logs (stdin) is checked between the places where the chain breaks."""
    n = len(digests)
    if n < 2:
        return []
    try:
        if _clean(cols, digests, 0, n):
            return []
        prevs, hashes = cols[1], cols[2]
        cuts = list(compress(count(1), map(ne, prevs[1:], hashes[:-1])))
        found: list[int] = []
        for start, stop in zip([0, *cuts], [*cuts, n], strict=True):
            if stop - start > 1 and not _clean(cols, digests, start, stop):  # one record: _run checks it
                found += [start + j for j in _pairwise([c[start:stop] for c in cols], digests[start:stop])]
        return sorted({*cuts, *found})
    except TypeError:  # a str seq, an unhashable event, a ts that is not a number: record by record
        rows = list(zip(*cols, strict=True))
        return [j for j in range(1, n) if not _continues(rows[j - 1], rows[j], digests[j - 1], digests[j])]


def typed_clean(cols: tuple[Column, ...], joined: str) -> bool:
    """_clean for typed records, whose hashes are 64 characters and events known: the stored hashes
    and the previous hashes compared as joined strings."""
    prevs, hashes = cast("tuple[str, ...]", cols[1]), cast("tuple[str, ...]", cols[2])  # msgspec checked: str
    return bool("".join(hashes) == joined and "".join(prevs[1:]) == joined[:-64] and _in_order(cols))


def _in_order(cols: Sequence[Column]) -> bool:
    """Consecutive `seq`s, one envelope and a clock that does not go backwards nor leave 2000-2100
    (its first and last times: the others lie between them), on whole columns."""
    _, _, _, gens, ranks, runs, sizes, _, _ = cols
    seqs, tss = _numbers(cols)
    n = len(seqs)
    return bool(
        seqs == tuple(range(seqs[0], seqs[0] + n))
        and gens.count(gens[0]) == n
        and ranks.count(ranks[0]) == n
        and runs.count(runs[0]) == n
        and sizes.count(sizes[0]) == n
        and all(map(le, tss, islice(tss, 1, None)))
        and tss[0] >= EARLIEST_TS
        and tss[-1] < LATEST_TS
    )


class HexDigests(Sequence[str]):
    """The records' hashes, read from their joined hex digests when asked for (a few per batch)."""

    __slots__ = ("joined",)

    def __init__(self, joined: str) -> None:
        self.joined = joined

    def __len__(self) -> int:
        return len(self.joined) // 64

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...  # Sequence's signature: a slice raises TypeError
    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        if type(i) is not int:
            raise TypeError("a single index")
        start = 64 * (i if i >= 0 else len(self) + i)
        return self.joined[start : start + 64]


def _clean(cols: Sequence[Column], digests: list[str], start: int, stop: int) -> bool:
    """Whether records [start, stop) each continue the one before unchanged, on whole columns."""
    n = stop - start
    whole = n == len(digests)
    part = cols if whole else [c[start:stop] for c in cols]
    prevs, hashes, evs = part[1], part[2], part[8]
    return bool(
        hashes == tuple(digests if whole else digests[start:stop])
        and prevs[1:] == hashes[:-1]
        and _in_order(part)
        and _EVENTS.issuperset(evs)
    )


def _pairwise(cols: Sequence[Column], digests: list[str]) -> list[int]:
    """_breaks record by record, still in C (ranks interleaved on stdin, a damaged log). Raises
    TypeError on a field of a type it cannot compare."""
    _, prevs, hashes, gens, ranks, runs, sizes, _, evs = cols
    seqs, tss = _numbers(cols)
    same = [map(eq, column[1:], column[:-1]) for column in (gens, ranks, runs, sizes)]
    ok = map(
        all,
        zip(
            map(eq, hashes[1:], digests[1:]),
            map(eq, prevs[1:], digests[:-1]),
            map(eq, seqs[1:], map(add, seqs[:-1], repeat(1))),
            *same,
            map(le, tss[:-1], tss[1:]),
            map(_possible, tss[1:]),
            map(_EVENTS.__contains__, evs[1:]),
            strict=True,
        ),
    )
    return list(compress(count(1), map(not_, ok)))


def _possible(ts: float) -> bool:
    return EARLIEST_TS <= ts < LATEST_TS


def _continues(before: Column, head: Column, prev: str, digest: str) -> bool:
    if head[2] is None or before[2] is None:  # a record without the fields (a row of None)
        return False
    numbers = cast("tuple[float, float, float, float]", (head[0], head[7], before[0], before[7]))
    seq, ts, before_seq, before_ts = numbers
    try:  # compared as numbers: another value raises TypeError
        return bool(
            seq == before_seq + 1
            and head[1] == prev
            and head[2] == digest
            and head[3:7] == before[3:7]
            and type(ts) is float
            and ts >= before_ts
            and EARLIEST_TS <= ts < LATEST_TS
            and head[8] in _EVENTS
        )
    except TypeError:
        return False
