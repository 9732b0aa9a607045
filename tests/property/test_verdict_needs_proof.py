"""The verdict is never `clean` without proof: real logs of a 2-rank world (the engine's), cut, edited,
reordered, deleted or re-hashed at any point, give `clean` only when every rank's log is there, its chain
verifies and it ends with its own clean closing record. The oracle checks that from the bytes alone."""

from __future__ import annotations

import hashlib
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "audit"))

from audit_logs import clean_run

from lifecycle.audit import VERDICT_EXIT, audit, judge
from lifecycle.log import GENESIS

WORLD = 2
_SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@cache
def world() -> tuple[tuple[bytes, ...], ...]:
    """Each rank's log lines (with their newlines), startup to shutdown, written by the real engine."""
    log_dir = clean_run(Path(tempfile.mkdtemp(prefix="verdict-proof-")), WORLD)
    return tuple(tuple((log_dir / f"rank-{r:05d}.jsonl").read_bytes().splitlines(keepends=True)) for r in range(WORLD))


def rehash(lines: list[bytes]) -> list[bytes]:
    """The chain recomputed over whatever records are left: what someone who wants the edit trusted does."""
    out, prev = [], GENESIS
    for seq, line in enumerate(lines):
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            return lines
        if not isinstance(rec, dict):
            return lines
        rec.pop("hash", None)
        rec.update(prev_hash=prev, seq=seq)
        body = orjson.dumps(rec, option=orjson.OPT_SORT_KEYS)
        prev = hashlib.sha256(body).hexdigest()
        out.append(body[:-1] + b',"hash":"' + prev.encode() + b'"}\n')
    return out


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=8), st.sampled_from(["SHUT_DOWN"]))


@st.composite
def damaged(draw: st.DrawFn) -> list[list[bytes] | None]:
    """Both ranks' logs after 1 to 3 damages; None: the file is gone."""
    files: list[list[bytes] | None] = [list(lines) for lines in world()]
    for _ in range(draw(st.integers(1, 3))):
        r = draw(st.integers(0, WORLD - 1))
        lines = files[r]
        if lines is None or not lines:
            continue
        op = draw(st.sampled_from(["cut", "delete", "swap", "edit", "drop_file", "rehash", "truncate_tail"]))
        i = draw(st.integers(0, len(lines) - 1))
        if op == "cut":  # keep the first i records, then part of the next line's bytes
            part = draw(st.integers(0, len(lines[i])))
            files[r] = [*lines[:i], lines[i][:part]] if part else lines[:i]
        elif op == "delete":
            files[r] = lines[:i] + lines[i + 1 :]
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "edit":
            try:
                rec = orjson.loads(lines[i])
            except orjson.JSONDecodeError:  # a line cut before: nothing left to edit
                continue
            key = draw(st.sampled_from(sorted(rec)))
            rec[key] = draw(VALUES)
            lines[i] = orjson.dumps(rec) + b"\n"
        elif op == "drop_file":
            files[r] = None
        elif op == "rehash":
            files[r] = rehash(lines)
        else:  # the last records gone: the chain of what is left still verifies
            files[r] = lines[: draw(st.integers(0, len(lines) - 1))]
    return files


def proved_clean(files: list[list[bytes] | None]) -> bool:
    """The oracle: every rank's file is there, each line a record, the chain verifies, and the log ends in
    its own shutdown (`transition_completed` to SHUT_DOWN)."""
    for lines in files:
        if not lines:
            return False
        prev: Any = GENESIS
        for seq, line in enumerate(lines):
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                return False
            if not isinstance(rec, dict) or not line.endswith(b"\n"):
                return False
            body = {k: v for k, v in rec.items() if k != "hash"}
            digest = hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()
            if rec.get("seq") != seq or rec.get("prev_hash") != prev or rec.get("hash") != digest:
                return False
            prev = digest
        last = orjson.loads(lines[-1])
        if (last.get("event"), last.get("dest")) != ("transition_completed", "SHUT_DOWN"):
            return False
    return True


def test_the_untouched_world_is_clean() -> None:
    files: list[list[bytes] | None] = [list(lines) for lines in world()]
    assert proved_clean(files) and verdict_of(files)["outcome"] == "clean"


def verdict_of(files: list[list[bytes] | None]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        for rank, lines in enumerate(files):
            if lines is not None:
                (Path(tmp) / f"rank-{rank:05d}.jsonl").write_bytes(b"".join(lines))
        result = audit([tmp], jobs=1)
        doc = judge(result)
    assert VERDICT_EXIT[str(doc["outcome"])] == (0 if doc["outcome"] == "clean" else 2 if result.errors else 1)
    return doc


@_SETTINGS
@given(files=damaged())
def test_a_damaged_world_is_never_clean_unless_every_clean_end_is_there_and_every_chain_verifies(
    files: list[list[bytes] | None],
) -> None:
    doc = verdict_of(files)
    if doc["outcome"] == "clean":
        assert proved_clean(files), doc
    if doc["outcome"] in ("unreadable", "tampered"):
        assert "exclude_hosts" not in doc and "culprit" not in doc  # no death invented, no host excluded
