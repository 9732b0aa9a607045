"""The hash chain, written by the log and verified by its readers (the audit and `lifecycle.testing`).

Each record carries `seq`, `prev_hash` (the previous record's `hash`, GENESIS for the first) and
`hash`: SHA-256 of the record's sorted-keys JSON without `hash`. The writer appends
`,"hash":"<hex>"}` last, so a reader can hash the line's own bytes (`line_hash_matches`) and only
re-serialize (`record_hash`) a line laid out any other way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import orjson

GENESIS = "0" * 64
HASH_KEY = b',"hash":"'
SUFFIX = len(HASH_KEY) + 64 + 2
_KEY_END = -SUFFIX + len(HASH_KEY)
_sha256 = hashlib.sha256


def record_hash(record: Mapping[str, object]) -> str:
    """SHA-256 of a record's canonical JSON, `hash` excluded (the chain covers `prev_hash`)."""
    body = {k: v for k, v in record.items() if k != "hash"}
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS, default=str)).hexdigest()


def line_hash_matches(line: bytes, record: Mapping[str, object], digest: str) -> bool:
    """Whether `digest` is the hash of the record on `line`: the writer's bytes hashed directly,
    else the record re-serialized."""
    as_written = line[-SUFFIX:_KEY_END] == HASH_KEY and line[-2:] == b'"}'
    if as_written and _sha256(line[:-SUFFIX] + b"}").hexdigest() == digest:
        return True
    try:
        return record_hash(record) == digest
    except (TypeError, ValueError):  # not serializable back (e.g. integers beyond 64 bits)
        return False


class ChainVerifier:
    """Follows one rank's chain record by record; `check` says what is wrong with the next one."""

    def __init__(self) -> None:
        self.prev = GENESIS
        self.seq = 0

    def check(self, record: Mapping[str, object], line: bytes | None = None) -> str | None:
        """None when `record` is the next link of the chain, else why not."""
        digest = record.get("hash")
        problem: str | None = None
        if not isinstance(digest, str) or "prev_hash" not in record:
            problem = "record has no hash chain ('hash'/'prev_hash' missing)"
        elif record.get("seq") != self.seq:
            problem = f"seq {record.get('seq')!r} where {self.seq} was expected"
        elif record["prev_hash"] != self.prev:
            problem = "prev_hash does not match the previous record's hash"
        elif not (line_hash_matches(line, record, digest) if line is not None else record_hash(record) == digest):
            problem = "hash does not match the record's content"
        self.prev = str(digest)
        self.seq += 1
        return problem
