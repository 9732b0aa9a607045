"""The hash chain as its readers rely on it: the writer's layout, `ChainVerifier` and the audit's chain
check each catch a record that was changed, re-hashed, re-linked, dropped or cut, and accept a clean
log however it was laid out.

Written to kill the mutants scripts/mutation makes of lifecycle/log/_chain.py, _writer.py's chaining
and the audit's chain check.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest

from lifecycle import InProcessPhases, Lifecycle, RunConfig
from lifecycle.audit import MAX_LOGS_PER_INPUT, audit
from lifecycle.log import GENESIS, AuditLog, ChainVerifier, record_hash
from lifecycle.log import events as ev
from lifecycle.testing import AuditResult, line_hash_matches
from states import State


def run_log(log_dir: Path, run_id: str = "run-a") -> Path:
    """A real rank's log: the engine with in-process phases, started up and shut down."""
    with Lifecycle(RunConfig(), log_dir=log_dir, phases=InProcessPhases(), run_id=run_id) as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
    return log_dir / "rank-00000.jsonl"


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return run_log(tmp_path / "logs")


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


def as_written(record: Mapping[str, Any]) -> bytes:
    """A record laid out as the writer lays it out, with `hash` recomputed for its content."""
    body = {k: v for k, v in record.items() if k != "hash"}
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)[:-1] + f',"hash":"{record_hash(body)}"}}'.encode()


def retimed(line: bytes) -> bytes:
    """The record on `line` with its timestamp changed and its old hash kept, laid out as written."""
    record = orjson.loads(line)
    body = {k: v for k, v in record.items() if k != "hash"}
    body["ts"] += 1.0
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)[:-1] + f',"hash":"{record["hash"]}"}}'.encode()


def verify(lines: list[bytes], *, with_lines: bool = True) -> list[str | None]:
    chain = ChainVerifier()
    return [chain.check(orjson.loads(line), line if with_lines else None) for line in lines]


def la009(result: AuditResult) -> list[str]:
    assert not result.errors, result.errors
    return [f.message for f in result.findings if f.rule == "LA009"]


def audit_file(path: Path, lines: list[bytes], max_logs: int = MAX_LOGS_PER_INPUT) -> AuditResult:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return audit([str(path)], jobs=1, max_logs_per_input=max_logs)


# -- the writer ------------------------------------------------------------------------------


def test_each_line_is_its_sorted_body_then_the_sha256_of_that_body(log: Path) -> None:
    for seq, line in enumerate(lines_of(log)):
        body, _, tail = line.rpartition(b',"hash":"')
        digest = tail[:-2].decode()
        assert tail.endswith(b'"}') and len(digest) == 64
        assert hashlib.sha256(body + b"}").hexdigest() == digest
        record = orjson.loads(line)
        assert record["seq"] == seq and list(record)[-1] == "hash"
        assert list(record)[:-1] == sorted(list(record)[:-1])


def test_the_chain_starts_at_genesis_and_links_each_record_to_the_one_before(log: Path) -> None:
    records = [orjson.loads(line) for line in lines_of(log)]
    assert records[0]["prev_hash"] == GENESIS == "0" * 64  # docs/log-format.md: 64 zeros for seq 0
    assert all(b["prev_hash"] == a["hash"] for a, b in itertools.pairwise(records))


def test_records_held_before_the_log_opens_are_written_first_and_in_order(tmp_path: Path) -> None:
    log = AuditLog(run_id="r", rank=2, world_size=4, keep_records=True)
    log.emit(ev.LIFECYCLE_STARTED, plan="training")
    log.emit(ev.TRANSITION_STARTED, trigger="validate", source="CONFIGURED")
    assert not log.is_open
    path = log.open(tmp_path)
    log.emit(ev.TRANSITION_STARTED, trigger="start_services", source="VALIDATED")
    log.close()
    assert path == tmp_path / "rank-00002.jsonl"
    written = [orjson.loads(line) for line in lines_of(path)]
    assert [r["seq"] for r in written] == [0, 1, 2]
    assert written == log.records
    assert verify(lines_of(path)) == [None, None, None]


def test_a_second_log_for_the_same_rank_appends_instead_of_erasing_the_first(tmp_path: Path) -> None:
    for _ in range(2):
        log = AuditLog(run_id="r", rank=0, world_size=1)
        log.emit(ev.LIFECYCLE_STARTED, plan="training")
        log.open(tmp_path)
        log.close()
    # the same run id coming back is a new attempt: the file keeps the first record and continues its chain
    assert [orjson.loads(line)["seq"] for line in lines_of(tmp_path / "rank-00000.jsonl")] == [0, 1]


# -- ChainVerifier -----------------------------------------------------------------------------


@pytest.mark.parametrize("with_lines", [True, False])
def test_a_clean_log_verifies_record_by_record(log: Path, with_lines: bool) -> None:
    assert verify(lines_of(log), with_lines=with_lines) == [None] * len(lines_of(log))


@pytest.mark.parametrize("with_lines", [True, False])
def test_a_relinked_record_is_caught_even_with_its_own_hash_recomputed(log: Path, with_lines: bool) -> None:
    lines = lines_of(log)
    record = orjson.loads(lines[3])
    lines[3] = as_written({**record, "prev_hash": "f" * 64})
    problems = verify(lines, with_lines=with_lines)
    assert problems[3] == problems[4] == "prev_hash does not match the previous record's hash"
    assert [i for i, p in enumerate(problems) if p] == [3, 4]


def test_a_first_record_not_linked_to_genesis_is_caught(log: Path) -> None:
    lines = lines_of(log)
    lines[0] = as_written({**orjson.loads(lines[0]), "prev_hash": "1" * 64})
    assert verify(lines)[0] == "prev_hash does not match the previous record's hash"


@pytest.mark.parametrize("with_lines", [True, False])
def test_a_changed_record_is_caught_once_and_the_records_after_it_still_verify(log: Path, with_lines: bool) -> None:
    lines = lines_of(log)
    lines[2] = retimed(lines[2])
    problems = verify(lines, with_lines=with_lines)
    assert problems[2] == "hash does not match the record's content"
    assert [i for i, p in enumerate(problems) if p] == [2]


def test_a_renumbered_record_is_caught_even_with_its_own_hash_recomputed(log: Path) -> None:
    lines = lines_of(log)
    lines[4] = as_written({**orjson.loads(lines[4]), "seq": 40})
    assert verify(lines)[4] == "seq 40 where 4 was expected"


def test_a_removed_record_is_caught_at_the_record_after_it(log: Path) -> None:
    lines = lines_of(log)
    problems = verify(lines[:2] + lines[3:])
    assert problems[2] == "seq 3 where 2 was expected"


@pytest.mark.parametrize("missing", ["hash", "prev_hash"])
def test_a_record_without_its_chain_fields_is_caught(log: Path, missing: str) -> None:
    record = orjson.loads(lines_of(log)[0])
    del record[missing]
    assert ChainVerifier().check(record) == "record has no hash chain ('hash'/'prev_hash' missing)"


def test_a_record_laid_out_another_way_but_unchanged_verifies(log: Path) -> None:
    lines = [orjson.dumps(dict(reversed(orjson.loads(line).items()))) for line in lines_of(log)]
    assert verify(lines) == [None] * len(lines)


def test_a_line_as_written_matches_its_hash_and_a_changed_one_does_not(log: Path) -> None:
    line = lines_of(log)[1]
    record = orjson.loads(line)
    assert line_hash_matches(line, record, record["hash"])
    changed = line.replace(b'"rank":0', b'"rank":7')
    assert not line_hash_matches(changed, orjson.loads(changed), record["hash"])


def test_a_record_that_cannot_be_serialized_back_is_a_mismatch_not_a_crash() -> None:
    record = {"event": "x", "n": 2**70, "prev_hash": GENESIS, "seq": 0, "hash": "0" * 64}
    line = b'{"event":"x","n":1180591620717411303424,"prev_hash":"' + GENESIS.encode() + b'","seq":0}'
    assert not line_hash_matches(line, record, "0" * 64)
    assert ChainVerifier().check(record, line) == "hash does not match the record's content"


# -- the audit's chain check ---------------------------------------------------------------------


def test_the_audit_finds_no_chain_problem_in_a_clean_log_and_counts_every_record(log: Path) -> None:
    result = audit([str(log)], jobs=1)
    assert la009(result) == []
    assert result.records == len(lines_of(log))


def test_the_audit_catches_a_relinked_record_whose_hash_was_recomputed(log: Path, tmp_path: Path) -> None:
    lines = lines_of(log)
    lines[3] = as_written({**orjson.loads(lines[3]), "prev_hash": "f" * 64})
    messages = la009(audit_file(tmp_path / "rank-00000.jsonl", lines))
    assert messages and all(m.startswith("prev_hash does not match the previous record's hash") for m in messages)


def test_the_audit_catches_a_first_record_not_linked_to_genesis(log: Path, tmp_path: Path) -> None:
    lines = lines_of(log)
    lines[0] = as_written({**orjson.loads(lines[0]), "prev_hash": "1" * 64})
    [message] = la009(audit_file(tmp_path / "rank-00000.jsonl", lines))
    assert message.startswith("first record's prev_hash is not genesis")


def test_the_audit_catches_a_changed_record_by_its_hash(log: Path, tmp_path: Path) -> None:
    lines = lines_of(log)
    lines[5] = lines[5].replace(b'"rank":0', b'"rank":0 ')
    lines[2] = retimed(lines[2])
    messages = la009(audit_file(tmp_path / "rank-00000.jsonl", lines))
    assert messages == ["hash of record seq 2 does not match its content: the record was changed"]


def test_the_audit_catches_a_removed_record_and_a_missing_head(log: Path, tmp_path: Path) -> None:
    lines = lines_of(log)
    [gap] = la009(audit_file(tmp_path / "a" / "rank-00000.jsonl", lines[:3] + lines[4:]))
    assert gap == "seq 4 follows seq 2: records were removed, inserted or reordered"
    [head] = la009(audit_file(tmp_path / "b" / "rank-00000.jsonl", lines[1:]))
    assert head == "log starts at seq 1, not 0: its head is missing (truncated)"


def test_the_audit_catches_a_record_without_its_chain(log: Path, tmp_path: Path) -> None:
    lines = lines_of(log)
    record = orjson.loads(lines[2])
    del record["hash"]
    lines[2] = orjson.dumps(record)
    [message] = la009(audit_file(tmp_path / "rank-00000.jsonl", lines))
    assert "no hash chain" in message


def test_the_audit_reports_a_cut_last_line_as_a_writer_that_died(log: Path, tmp_path: Path) -> None:
    lines = lines_of(log)
    path = tmp_path / "rank-00000.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines[:-1]) + lines[-1][:30])
    result = audit([str(path)], jobs=1)
    assert any("is truncated: the writer died mid-record" in m for m in la009(result))


def test_a_cut_line_in_the_middle_is_unreadable_with_its_line_number(log: Path, tmp_path: Path) -> None:
    lines = lines_of(log)
    lines[3] = lines[3][:30]
    result = audit_file(tmp_path / "rank-00000.jsonl", lines)
    assert result.errors and ":4" in str(result.errors[0]) and "not a JSON record" in str(result.errors[0])


def test_the_audit_accepts_a_log_laid_out_another_way(log: Path, tmp_path: Path) -> None:
    lines = [orjson.dumps(dict(reversed(orjson.loads(line).items()))) for line in lines_of(log)]
    assert la009(audit_file(tmp_path / "rank-00000.jsonl", lines)) == []


def test_two_ranks_logs_interleaved_in_one_input_are_followed_by_their_chains(tmp_path: Path) -> None:
    first = lines_of(run_log(tmp_path / "a", run_id="run-a"))
    second = lines_of(run_log(tmp_path / "b", run_id="run-b"))
    mixed = [line for pair in zip(first, second, strict=False) for line in pair]
    mixed += first[len(second) :] + second[len(first) :]
    result = audit_file(tmp_path / "mixed.jsonl", mixed)
    assert la009(result) == []
    assert sorted(r.run_id for r in result.ranks) == ["run-a", "run-b"]
    assert result.records == len(first) + len(second)


def test_a_seq_that_is_not_an_integer_makes_the_log_unreadable(log: Path, tmp_path: Path) -> None:
    lines = lines_of(log)
    lines[2] = as_written({**orjson.loads(lines[2]), "seq": "2"})
    result = audit_file(tmp_path / "rank-00000.jsonl", lines)
    assert result.errors and "field 'seq' is '2', expected an int" in str(result.errors[0])


BIG = 1180591620717411303424  # 2**70: JSON allows it; read back it becomes a float, so re-serializing changes the bytes


def with_big_number(line: bytes) -> bytes:
    """`line` with one more field holding a number beyond 64 bits, hashed over its bytes as the writer does."""
    record = orjson.loads(line)
    body = orjson.dumps({k: v for k, v in record.items() if k != "hash"}, option=orjson.OPT_SORT_KEYS)
    body = body[:-1] + b',"zz_big":' + str(BIG).encode() + b"}"
    return body[:-1] + f',"hash":"{hashlib.sha256(body).hexdigest()}"}}'.encode()


def test_a_line_as_written_verifies_from_its_bytes_even_when_its_numbers_do_not_round_trip(log: Path) -> None:
    lines = lines_of(log)
    lines[-1] = with_big_number(lines[-1])
    record = orjson.loads(lines[-1])
    assert record["zz_big"] != BIG or type(record["zz_big"]) is not int  # the parsed record lost the bytes
    assert line_hash_matches(lines[-1], record, record["hash"])
    assert verify(lines) == [None] * len(lines)


def test_the_audit_verifies_a_line_as_written_from_its_bytes(log: Path, tmp_path: Path) -> None:
    lines = lines_of(log)
    lines[-1] = with_big_number(lines[-1])
    assert la009(audit_file(tmp_path / "rank-00000.jsonl", lines)) == []


def test_the_log_directory_is_created_with_its_missing_parents(tmp_path: Path) -> None:
    log_dir = tmp_path / "runs" / "job-7" / "logs"
    with Lifecycle(RunConfig(), log_dir=log_dir, phases=InProcessPhases()) as lc:
        lc.validate()
    assert verify(lines_of(log_dir / "rank-00000.jsonl"))[0] is None


def test_two_chains_of_the_same_rank_interleaved_in_one_file_are_told_apart(tmp_path: Path) -> None:
    """Two lifecycles of one run in one process (an in-process rebuild) append to the same rank file."""
    first = lines_of(run_log(tmp_path / "a"))
    second = lines_of(run_log(tmp_path / "b"))
    mixed = [line for pair in zip(first, second, strict=False) for line in pair]
    mixed += first[len(second) :] + second[len(first) :]
    result = audit_file(tmp_path / "rank-00000.jsonl", mixed)
    assert la009(result) == []
    assert len(result.ranks) == 2


def rechained(lines: list[bytes]) -> list[bytes]:
    """Lines as written, each re-linked to the one before and re-hashed over its bytes."""
    out, prev = [], GENESIS
    for line in lines:
        body = line[: line.rindex(b',"hash":"')] + b"}"
        start = body.index(b'"prev_hash":"') + len(b'"prev_hash":"')
        body = body[:start] + prev.encode() + body[start + 64 :]
        prev = hashlib.sha256(body).hexdigest()
        out.append(body[:-1] + f',"hash":"{prev}"}}'.encode())
    return out


def test_the_audit_verifies_a_first_record_as_written_from_its_bytes(log: Path, tmp_path: Path) -> None:
    """The first record of a log is checked in full (not by the reader's hot loop)."""
    lines = lines_of(log)
    lines[0] = with_big_number(lines[0])
    assert la009(audit_file(tmp_path / "rank-00000.jsonl", rechained(lines))) == []


def test_a_record_whose_prev_hash_is_not_a_string_is_reported_not_a_crash(log: Path, tmp_path: Path) -> None:
    lines = lines_of(log)
    record = orjson.loads(lines[4])
    lines[4] = orjson.dumps({**record, "prev_hash": ["not", "a", "hash"]})
    messages = la009(audit_file(tmp_path / "rank-00000.jsonl", lines))
    assert any("no hash chain" in m for m in messages)


def test_an_input_may_start_exactly_as_many_logs_as_the_limit(log: Path, tmp_path: Path) -> None:
    head = lines_of(log)[:1]
    assert not audit_file(tmp_path / "three.jsonl", head * 3, max_logs=3).errors
    refused = audit_file(tmp_path / "four.jsonl", head * 4, max_logs=3).errors
    assert refused and "more than 3 logs start in this one input" in str(refused[0])


def test_a_run_id_that_changes_inside_an_intact_chain_is_flagged(log: Path, tmp_path: Path) -> None:
    lines = lines_of(log)
    lines[6:] = [line.replace(b'"run_id":"run-a"', b'"run_id":"run-b"') for line in lines[6:]]
    result = audit_file(tmp_path / "rank-00000.jsonl", rechained(lines))
    assert la009(result) == []
    assert [(f.rule, f.line) for f in result.findings if f.rule == "LA016"] == [("LA016", 7)]


def test_a_rank_that_died_on_a_broken_record_is_reported_at_that_line(log: Path, tmp_path: Path) -> None:
    lines = lines_of(log)[:6]
    lines[5] = retimed(lines[5])
    result = audit_file(tmp_path / "rank-00000.jsonl", lines)
    assert {(f.rule, f.line) for f in result.findings} == {("LA009", 6), ("LA010", 6), ("LA018", 6)}


def test_a_replayed_first_record_after_a_log_is_a_break_in_that_log_not_a_new_one(log: Path, tmp_path: Path) -> None:
    lines = lines_of(log)
    replayed = as_written({**orjson.loads(lines[0]), "prev_hash": "2" * 64})
    result = audit_file(tmp_path / "rank-00000.jsonl", [*lines, replayed])
    assert len(result.ranks) == 1
    assert la009(result) == [f"seq 0 follows seq {len(lines) - 1}: records were removed, inserted or reordered"]


def test_open_continues_a_log_only_when_it_can_and_overwrite_replaces_one_it_cannot(tmp_path: Path) -> None:
    """`AuditLog.open(overwrite=False)` claims the directory to append: a rank file that does not end
    in a chained record is refused (open returns None, the refusal is the log's fault, the file
    untouched); `overwrite=True` claims it to overwrite and replaces it."""
    content = b'{"event":"lifecycle_started","run_id":"run-old"}\n{"no": "chain"}\n'
    path = tmp_path / "rank-00000.jsonl"
    path.write_bytes(content)
    appending = AuditLog(run_id="run-new", rank=0, world_size=1)
    assert appending.open(tmp_path) is None
    assert isinstance(appending.fault, PermissionError)
    assert str(appending.fault).startswith(
        f"log_dir {str(tmp_path)!r}: rank-00000.jsonl does not end with a hash-chained"
    )
    assert path.read_bytes() == content
    appending.close()
    overwriting = AuditLog(run_id="run-new", rank=0, world_size=1)
    assert overwriting.open(tmp_path, overwrite=True) == path and overwriting.fault is None
    overwriting.emit(ev.STEP_COMPLETED, step=1)
    overwriting.close()
    assert [orjson.loads(line)["run_id"] for line in lines_of(path)] == ["run-new"]
