"""The startup log: per-rank JSON lines, buffered until validation, hash-chained, redacted."""

from __future__ import annotations

import itertools
import sys
import threading
from pathlib import Path

import orjson
import pytest

from lifecycle import InProcessPhases, Lifecycle, RunConfig
from lifecycle.log import GENESIS, AuditLog, record_hash
from lifecycle.log import events as ev
from lifecycle.testing import REDACTED, check_log, is_secret_key, read_log, redact
from states import STARTUP_ORDER, State

FIXED = {"ts", "seq", "run_id", "rank", "world_size", "generation", "event", "prev_hash", "hash"}


def test_records_before_validation_are_held_and_written_once_the_log_dir_is_validated(tmp_path: Path) -> None:
    log_dir = tmp_path / "not-yet"
    lc = Lifecycle(RunConfig(), log_dir=log_dir, phases=InProcessPhases(), options={"keep_records": True})
    assert not log_dir.exists() and lc.log_path is None
    lc.validate()
    assert lc.log_path == log_dir / "rank-00000.jsonl"
    assert read_log(lc.log_path) == lc.records
    assert [r["event"] for r in lc.records][:3] == ["lifecycle_started", "transition_started", "config_validated"]
    lc.shutdown()


def test_every_record_has_the_fixed_fields_and_a_known_event(tmp_path: Path) -> None:
    with Lifecycle(RunConfig(), log_dir=tmp_path, phases=InProcessPhases(), run_id="job-7") as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
    records = read_log(tmp_path / "rank-00000.jsonl")
    for rec in records:
        assert rec.keys() >= FIXED and rec["event"] in ev.ALL
        assert rec["run_id"] == "job-7" and rec["rank"] == 0 and rec["world_size"] == 1
    done = [r for r in records if r["event"] == "transition_completed"]
    chain = [s.name for s in STARTUP_ORDER]  # each step of the chain, in order, then the shutdown
    assert [(r["source"], r["dest"]) for r in done] == [*itertools.pairwise(chain), (chain[-1], "SHUT_DOWN")]
    assert all(r["duration_s"] >= 0 for r in done)
    [validated] = [r for r in records if r["event"] == "config_validated"]
    assert validated["fingerprint"] == RunConfig().fingerprint() == done[1]["config_fingerprint"]
    assert check_log(records) == []


def test_a_crash_keeps_every_record_written_so_far(tmp_path: Path) -> None:
    lc = Lifecycle(RunConfig(), log_dir=tmp_path, phases=InProcessPhases(), options={"keep_records": True})
    lc.advance_to(State.DISTRIBUTED)
    # no shutdown, no close: the file already holds everything (unbuffered, one write per record)
    assert read_log(tmp_path / "rank-00000.jsonl") == lc.records


@pytest.mark.parametrize("index", [0, 3, 7])
def test_changing_removing_or_reordering_a_record_breaks_the_chain(tmp_path: Path, index: int) -> None:
    with Lifecycle(RunConfig(), log_dir=tmp_path, phases=InProcessPhases()) as lc:
        lc.advance_to(State.MODEL_BUILT)
    records = read_log(tmp_path / "rank-00000.jsonl")
    changed = [dict(r) for r in records]
    changed[index]["ts"] += 1
    assert check_log(changed)
    assert check_log(records[:index] + records[index + 1 :])
    swapped = list(records)
    swapped[index], swapped[index + 1] = swapped[index + 1], swapped[index]
    assert check_log(swapped)
    assert check_log(records) == []


def test_the_hash_covers_the_previous_hash() -> None:
    log = AuditLog(run_id="r", rank=3, world_size=8, keep_records=True)
    log.emit(ev.LIFECYCLE_STARTED, plan="training")
    log.emit(ev.TRANSITION_STARTED, trigger="validate", source="CONFIGURED")
    first, second = log.records
    assert first["prev_hash"] == GENESIS and second["prev_hash"] == first["hash"]
    assert record_hash(second) == second["hash"]
    assert record_hash({**second, "prev_hash": GENESIS}) != second["hash"]


def test_unknown_event_names_are_refused() -> None:
    log = AuditLog(run_id="r", rank=0, world_size=1)
    with pytest.raises(ValueError, match="events.py"):
        log.emit("TransitionDone")


@pytest.mark.parametrize("key", ["hf_token", "api_key", "wandb_api_key", "db_password", "secret", "AUTH", "apikey"])
def test_secret_looking_keys_are_redacted(key: str) -> None:
    assert is_secret_key(key)
    assert redact({"tokenizer": {key: "s3cr3t", "type": "null"}}) == {"tokenizer": {key: REDACTED, "type": "null"}}


@pytest.mark.parametrize("key", ["tokenizer", "vocab_size", "max_tokens", "author_name"])
def test_ordinary_keys_are_kept(key: str) -> None:
    assert not is_secret_key(key)


def test_the_log_file_is_valid_json_lines_even_with_odd_values(tmp_path: Path) -> None:
    log = AuditLog(run_id="r", rank=0, world_size=1)
    log.open(tmp_path)
    log.emit(ev.STEP_COMPLETED, step=1, loss=float("nan"), duration_s=0.1)
    log.emit(ev.CONFIG_MUTATED, field="checkpoint.save", validated="/a", current=Path("/x"))
    log.close()
    step, mutated = [orjson.loads(x) for x in (tmp_path / "rank-00000.jsonl").read_bytes().splitlines()]
    assert step["loss"] is None and mutated["current"] == "/x"
    assert record_hash(step) == step["hash"] and record_hash(mutated) == mutated["hash"]


def test_records_emitted_from_two_threads_at_once_keep_one_unbroken_chain(tmp_path: Path) -> None:
    """The rank watch's thread logs `peer_failed` while the main thread may still log its own records."""
    log = AuditLog(run_id="r", rank=0, world_size=1)
    path = log.open(tmp_path)
    assert path is not None

    def emit_many() -> None:
        for n in range(2000):
            log.emit(ev.WARNING, category="c", module="m", message="x", lineno=n)

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can: inside a record's chaining too
    try:
        threads = [threading.Thread(target=emit_many) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(before)
    log.close()
    records, prev = read_log(path), GENESIS
    assert [r["seq"] for r in records] == list(range(4000))
    for rec in records:
        assert rec["prev_hash"] == prev and record_hash(rec) == rec["hash"]
        prev = str(rec["hash"])
