"""10,000 rank files are summarised by the ranks their records hold: the summary line's ranges and
count, and the ranks with no log (LA014), named by rank at any place in the 10,000."""

from __future__ import annotations

import hashlib
from pathlib import Path

import orjson

from lifecycle.audit import audit, text
from lifecycle.log import GENESIS

WORLD = 10_000


def _logs(root: Path, ranks: list[int]) -> Path:
    """Rank r's log: its first record alone (`lifecycle_started`), chained as AuditLog writes it."""
    for rank in ranks:
        rec = {
            "event": "lifecycle_started",
            "generation": 0,
            "host": "h",
            "pid": 1,
            "plan": "training",
            "policy": "raise",
            "prev_hash": GENESIS,
            "rank": rank,
            "rehearsal": None,
            "run_id": "r",
            "seq": 0,
            "target": "CALLBACKS_BOUND",
            "ts": 1_800_000_000.0 + rank / 1000,
            "world_size": WORLD,
        }
        body = orjson.dumps(rec, option=orjson.OPT_SORT_KEYS)
        digest = hashlib.sha256(body).hexdigest().encode()
        (root / f"rank-{rank:05d}.jsonl").write_bytes(body[:-1] + b',"hash":"' + digest + b'"}\n')
    return root


def test_ten_thousand_files_are_summarised_by_the_ranks_their_records_hold(tmp_path: Path) -> None:
    first = text(audit([str(_logs(tmp_path, list(range(WORLD))))], jobs=1)).splitlines()[0]
    assert first.startswith(f"audited {WORLD} records from {WORLD} inputs, ranks 0-9999 ({WORLD} ranks)"), first


def test_the_ranks_missing_from_ten_thousand_are_named_by_rank(tmp_path: Path) -> None:
    gone = (0, 17, 5000, 5001, 9999)
    lines = text(audit([str(_logs(tmp_path, [r for r in range(WORLD) if r not in gone]))], jobs=1)).splitlines()
    assert f"ranks 1-16,18-4999,5002-9998 ({WORLD - len(gone)} ranks)" in lines[0], lines[0]
    assert any(
        "LA014 [missing-ranks] world_size is 10000 but there is no log for ranks 0,17,5000-5001,9999 (5 ranks)" in line
        for line in lines
    ), lines[:20]
