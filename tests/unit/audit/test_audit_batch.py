"""The batch reader (`_feed.py`: typed msgspec records, whole-column checks, steps counted in bulk)
gives exactly what checking each record on its own gives (`RankAudit.feed` on orjson dicts).

Hypothesis writes logs of random event sequences, byte for byte as AuditLog lays them out, some of
them damaged (a field of another type, a non-ASCII text, a hash of the wrong length, a record out
of order, a clock going backwards), and compares the findings, the timing segments, the failure
and the counts of the two readers.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lifecycle.audit import audit, audit_tapped
from lifecycle.errors import LogUnreadable
from lifecycle.log import GENESIS
from lifecycle.testing import AUDIT_READ_TYPES, HANDLERS, READS, RECORD_TYPES, RankAudit, decode_typed

STATES = [
    "CONFIGURED",
    "VALIDATED",
    "SERVICES_READY",
    "DISTRIBUTED",
    "MODEL_BUILT",
    "CALLBACKS_BOUND",
    "FAILED",
    "SHUT_DOWN",
]
TRIGGERS = [
    "validate",
    "start_services",
    "init_distributed",
    "build_model",
    "bind_callbacks",
    "rebuild",
    "restart",
    "shutdown",
]

_event = st.one_of(
    st.tuples(st.just("transition_started"), st.fixed_dictionaries({"trigger": st.sampled_from(TRIGGERS)})),
    st.tuples(
        st.just("transition_completed"),
        st.fixed_dictionaries(
            {
                "trigger": st.sampled_from(TRIGGERS),
                "dest": st.sampled_from(STATES),
                "config_fingerprint": st.sampled_from([None, "f" * 64, "e" * 64]),
            }
        ),
    ),
    st.tuples(
        st.just("transition_failed"),
        st.fixed_dictionaries(
            {"trigger": st.sampled_from(TRIGGERS), "error_type": st.just("E"), "error": st.text(max_size=8)}
        ),
    ),
    st.tuples(st.just("config_validated"), st.fixed_dictionaries({"fingerprint": st.sampled_from(["f" * 64])})),
    st.tuples(st.just("side_effect"), st.fixed_dictionaries({"kind": st.just("rng"), "trigger": st.just("x")})),
    st.tuples(st.just("model_built"), st.fixed_dictionaries({"model_config_id": st.sampled_from(["0x1", "0x2"])})),
    st.tuples(
        st.just("callbacks_bound"),
        st.fixed_dictionaries(
            {
                "target_id": st.sampled_from(["0x1", "0x2"]),
                "scheduler_config_id": st.sampled_from(["0x1", "0x2"]),
                "target_type": st.just("TransformerConfig"),
            }
        ),
    ),
    st.tuples(st.just("callbacks_unbound"), st.just({})),
    st.tuples(st.just("step_completed"), st.fixed_dictionaries({"step": st.integers(1, 9), "loss": st.just(1.5)})),
    st.tuples(st.just("first_step_finalized"), st.just({"finalizer_calls": 1})),
    st.tuples(st.just("first_step_not_finalized"), st.just({"finalizer_calls": 2})),
    st.tuples(st.just("lifecycle_shutdown"), st.just({})),
    st.tuples(st.just("startup_aborted"), st.just({"signal": "SIGTERM"})),
    st.tuples(st.just("peer_failed"), st.just({"peer_rank": 1, "peer_state": "DISTRIBUTED", "error": "x"})),
    st.tuples(st.just("services_ready"), st.just({"tokenizer": "T", "vocab_size": 8})),
    st.tuples(
        st.just("cycle_started"),
        st.fixed_dictionaries({"world_size": st.sampled_from([1, 2, "2"]), "launched_world_size": st.just(2)}),
    ),
)
_start = st.tuples(
    st.just("lifecycle_started"),
    st.fixed_dictionaries(
        {"plan": st.sampled_from(["training", "model"]), "target": st.sampled_from([None, "CALLBACKS_BOUND"])}
    ),
)
DAMAGE = (
    "none",
    "int_trigger",
    "non_ascii",
    "short_hash",
    "swap",
    "clock_back",
    "int_ts",
    "drop_seq",
    "relink",
    "drop_line",
    "world_size",
    "generation",
    "rank",
    "run_id",
    "bad_hash",
    "str_ts",
    "unknown_event",
    "far_future",
    "unset_clock",
    "type_generation",
    "type_rank",
    "type_world_size",
    "type_run_id",
)
BOUND = [
    ("transition_started", {"trigger": "validate"}),
    ("config_validated", {"fingerprint": "f" * 64}),
    ("transition_completed", {"trigger": "validate", "dest": "VALIDATED"}),
    ("model_built", {"model_config_id": "0x1"}),
    ("transition_completed", {"trigger": "bind_callbacks", "dest": "CALLBACKS_BOUND"}),
    ("callbacks_bound", {"target_id": "0x1", "scheduler_config_id": "0x1"}),
]
"""A prefix that reaches CALLBACKS_BOUND, where steps are counted in bulk."""
REBUILT = [
    ("transition_completed", {"trigger": "rebuild", "dest": "DISTRIBUTED"}),
    ("model_built", {"model_config_id": "0x2"}),
    ("transition_completed", {"trigger": "bind_callbacks", "dest": "CALLBACKS_BOUND"}),
]
"""Then a rebuild, bound again without a callbacks_bound record: a step now is LA004, not a count."""


def _damage_records(records: list[dict[str, Any]], damage: str, at: int) -> None:
    """The damages to a record's fields, before the chain is computed."""
    if damage == "int_trigger":
        records[at]["trigger"] = 7
    elif damage == "non_ascii":
        records[at]["error"] = "naïve ☃"
    elif damage == "clock_back":
        records[at]["ts"] = 1.0
    elif damage == "int_ts":
        records[at]["ts"] = 100 + at
    elif damage == "far_future":  # after 2100 (LA022)
        records[at]["ts"] = 5e9
    elif damage == "unset_clock":  # from `at` on, a clock that runs in order but in 1970 (LA022 on each record)
        for n, rec in enumerate(records[at:]):
            rec["ts"] = 500.0 + n
    elif damage in ("world_size", "rank", "run_id"):
        records[at][damage] = 9 if damage != "run_id" else "other"
    elif damage.startswith("type_"):  # a field of the envelope with the wrong type: refused, on every path
        key = damage[len("type_") :]
        records[at][key] = "0" if key != "run_id" else 0
    elif damage == "unknown_event":
        records[at]["event"] = "no_such_event"
    elif damage == "str_ts":  # a type the columns cannot compare: the batch is split record by record
        records[at]["ts"] = "late"
    elif damage == "generation":
        for rec in records[at:]:
            rec["generation"] = 1
    elif damage == "swap" and at + 1 < len(records):
        records[at], records[at + 1] = records[at + 1], records[at]


def _write(
    path: Path,
    events: list[tuple[str, dict[str, Any]]],
    damage: str,
    at: int,
    rank: int = 3,
    world: int = 8,
    utf8: bool = False,
) -> None:
    """The records as AuditLog writes them (sorted keys, SHA-256 chain, `hash` last), then `damage`
    at record `at`, with the chain recomputed unless the damage is to the chain itself."""
    records = [
        {
            "run_id": "r",
            "rank": rank,
            "world_size": world,
            "generation": 0,
            **fields,
            "event": event,
            "ts": 1.7e9 + i // 2,
        }
        for i, (event, fields) in enumerate(events)
    ]
    at %= len(records)
    if utf8:
        records[-1]["note"] = "naïve"
    _damage_records(records, damage, at)
    prev, lines = GENESIS, []
    for seq, rec in enumerate(records):
        rec = {**rec, "seq": rec.get("seq", seq), "prev_hash": prev}
        if damage == "drop_seq" and seq == at:
            rec["seq"] = seq + 5
        if damage == "relink" and seq == at:  # a record that does not follow the one before, re-hashed itself
            rec["prev_hash"] = "1" * 64
        body = orjson.dumps(rec, option=orjson.OPT_SORT_KEYS)
        digest = hashlib.sha256(body).hexdigest()
        stored = digest[:63] if damage == "short_hash" and seq == at else digest
        if damage == "bad_hash" and seq == at:  # the right length, the wrong value: still a typed record
            stored = ("0" if digest[0] != "0" else "1") + digest[1:]
        lines.append(body[:-1] + b',"hash":"' + stored.encode() + b'"}\n')
        prev = stored
    if damage == "drop_line" and len(lines) > 1:
        del lines[at]
    path.write_bytes(b"".join(lines))


def _one_by_one(path: Path) -> tuple[Any, ...]:
    rank = RankAudit(str(path))
    try:
        for lineno, line in enumerate(path.read_bytes().splitlines(), 1):
            rank.feed(orjson.loads(line), line, lineno)
    except LogUnreadable as exc:
        return ("error", str(exc), rank.records)
    rank.finish()
    return _summary(rank)


def _summary(rank: RankAudit) -> tuple[Any, ...]:
    return (
        rank.findings(),
        rank.segments,
        rank.failure,
        rank.transitions,
        rank.records,
        rank.state,
        rank.last_ts,
        rank.envelope,
        rank.world_size,
        rank.model_gen,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    start=_start,
    prefix=st.sampled_from([[], BOUND, BOUND + REBUILT]),
    events=st.lists(_event, min_size=1, max_size=40),
    damage=st.sampled_from(DAMAGE),
    at=st.one_of(st.integers(0, 2), st.integers(0, 60)),
    utf8=st.booleans(),
)
def test_the_batch_reader_agrees_with_record_by_record_checks(
    tmp_path: Path, start: Any, prefix: Any, events: Any, damage: str, at: int, utf8: bool
) -> None:
    """`utf8`: a non-ASCII field in the last record, so orjson reads the batch instead of msgspec."""
    path = tmp_path / "rank-00003.jsonl"
    _write(path, [start, *prefix, *events], damage, at, utf8=utf8)
    result = audit([str(path)], jobs=1)
    expected = _one_by_one(path)
    if expected[0] == "error":
        assert ([str(e) for e in result.errors], result.records) == ([expected[1]], expected[2])
    else:
        assert not result.errors and len(result.ranks) == 1
        assert _summary(result.ranks[0]) == expected


def test_a_run_of_steps_at_callbacks_bound_is_counted_for_the_rules_that_read_the_count(tmp_path: Path) -> None:
    """LA031 reads the count of steps on a binding when it closes: steps counted in bulk must be
    counted before the record that closes the binding, on every path."""
    path = tmp_path / "rank-00003.jsonl"
    bound = [
        ("transition_completed", {"trigger": "bind_callbacks", "dest": "CALLBACKS_BOUND"}),
        ("callbacks_bound", {"target_id": "0x1", "scheduler_config_id": "0x1"}),
    ]
    steps = [("step_completed", {"step": n}) for n in range(1, 6)]
    _write(
        path,
        [
            ("lifecycle_started", {"plan": "training"}),
            ("config_validated", {"fingerprint": "f" * 64}),
            ("model_built", {"model_config_id": "0x1"}),
            *bound,
            *steps,
            ("callbacks_unbound", {}),
            *bound,
            *steps[:2],
            ("first_step_finalized", {}),
            ("lifecycle_shutdown", {}),
        ],
        "none",
        0,
    )
    result = audit([str(path)], jobs=1)
    la031 = [f for f in result.findings if f.rule == "LA031"]
    assert [f.message.split(" training")[0] for f in la031] == ["5"]
    assert _summary(result.ranks[0]) == _one_by_one(path)


def test_steps_at_the_end_of_a_log_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "rank-00003.jsonl"
    _write(
        path,
        [("lifecycle_started", {"plan": "training"}), *BOUND, *[("step_completed", {"step": n}) for n in range(1, 4)]],
        "none",
        0,
    )
    result = audit([str(path)], jobs=1)
    assert [f.message.split(" training")[0] for f in result.findings if f.rule == "LA031"] == ["3"]


class Runs:
    """A tap that keeps the runs of records (input lines [start, end)) the batch path applies at once."""

    def __init__(self) -> None:
        self.runs: list[tuple[int, int]] = []

    def __call__(self, lines: list[bytes], recs: Sequence[object]) -> None:
        return None

    def applied(self, start: int, end: int) -> None:
        self.runs.append((start, end))


@pytest.mark.parametrize("text", ["T", "naïve ☃"], ids=["ascii-typed", "utf8-orjson"])
@pytest.mark.parametrize("shape", ["files", "concatenated", "interleaved"])
def test_clean_logs_never_take_the_record_by_record_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str, text: str
) -> None:
    """The batch checks decline nothing that is clean: a check that declined too much would give the
    same findings, only slower, so this is what catches it (and a slowdown)."""
    events = [
        ("lifecycle_started", {"plan": "training"}),
        ("services_ready", {"tokenizer": text}),
        *BOUND,
        *[("step_completed", {"step": n}) for n in range(1, 4)],
        ("first_step_finalized", {}),
        ("lifecycle_shutdown", {}),
        ("transition_completed", {"trigger": "shutdown", "dest": "SHUT_DOWN"}),
    ]
    logs = tmp_path / "logs"
    logs.mkdir()
    for rank in range(3):
        _write(logs / f"rank-{rank:05d}.jsonl", events, "none", 0, rank=rank, world=3)
    per_rank = [p.read_bytes().splitlines(keepends=True) for p in sorted(logs.iterdir())]
    joined = tmp_path / "all.jsonl"
    if shape == "concatenated":
        joined.write_bytes(b"".join(line for lines in per_rank for line in lines))
    elif shape == "interleaved":
        joined.write_bytes(b"".join(line for group in zip(*per_rank, strict=True) for line in group))
    calls: list[int] = []
    feed = RankAudit.feed
    monkeypatch.setattr(RankAudit, "feed", lambda self, *a: (calls.append(a[2]), feed(self, *a)))
    result, taps = audit_tapped([str(logs if shape == "files" else joined)], lambda _name: Runs(), jobs=1)
    runs = [run for tap in taps for run in cast(Runs, tap).runs]
    assert not result.findings and not result.errors and len(result.ranks) == 3
    assert result.records == 3 * len(events) and calls == []
    # each log is one run of records, unless its ranks are interleaved: then every record is one
    assert len(runs) == (3 * len(events) if shape == "interleaved" else 3)


REBOUND = [
    ("transition_completed", {"trigger": "rebuild", "dest": "CALLBACKS_BOUND"}),
    ("model_built", {"model_config_id": "0x2"}),
]
"""A rebuild logged as landing at CALLBACKS_BOUND itself: the batch reader starts a new pass there."""


@pytest.mark.parametrize(
    "rebuild",
    [REBUILT, REBOUND, "checked-in-full"],
    ids=["rebuilt-then-bound", "rebuilt-at-bound", "then-a-record-checked-in-full"],
)
def test_a_step_after_a_rebuild_bound_without_callbacks_bound_is_la004_not_a_count(
    tmp_path: Path, rebuild: Any
) -> None:
    """The last case: a relinked record after the rebuild goes to the full check, so the steps after
    it start a new run while a rebind is pending at CALLBACKS_BOUND."""
    path = tmp_path / "rank-00003.jsonl"
    middle = [*REBOUND, ("services_ready", {"tokenizer": "T"})] if rebuild == "checked-in-full" else rebuild
    events = [
        ("lifecycle_started", {"plan": "training"}),
        *BOUND,
        *middle,
        ("step_completed", {"step": 1}),
        ("step_completed", {"step": 2}),
    ]
    _write(path, events, "relink" if rebuild == "checked-in-full" else "none", len(events) - 3)
    result = audit([str(path)], jobs=1)
    assert [f.rule for f in result.findings if f.rule == "LA004"] == ["LA004"]
    assert "trained without rebinding" in next(f.message for f in result.findings if f.rule == "LA004")
    assert _summary(result.ranks[0]) == _one_by_one(path)


LEAVE = {
    "shutdown": [("transition_completed", {"trigger": "shutdown", "dest": "SHUT_DOWN"})],
    "rebuild": [("transition_completed", {"trigger": "rebuild", "dest": "DISTRIBUTED"})],
    "fail": [("transition_failed", {"trigger": "bind_callbacks", "error_type": "E", "error": "x"})],
}


@pytest.mark.parametrize("leave", sorted(LEAVE))
def test_steps_after_leaving_callbacks_bound_are_handled_not_counted(tmp_path: Path, leave: str) -> None:
    """Steps at CALLBACKS_BOUND are counted; once the state moves on, each step is LA030 again."""
    path = tmp_path / "rank-00003.jsonl"
    steps = [("step_completed", {"step": n}) for n in range(1, 3)]
    _write(
        path,
        [
            ("lifecycle_started", {"plan": "training"}),
            *BOUND,
            *steps,
            ("first_step_finalized", {}),
            *LEAVE[leave],
            *steps,
        ],
        "none",
        0,
    )
    result = audit([str(path)], jobs=1)
    assert "LA030" in {f.rule for f in result.findings}
    assert _summary(result.ranks[0]) == _one_by_one(path)


def test_a_refusal_in_a_run_that_starts_mid_batch_counts_the_records_read(tmp_path: Path) -> None:
    """A line removed (the record after it is checked in full), then a record whose handler refuses
    it, in a run that starts after that record."""
    path = tmp_path / "rank-00003.jsonl"
    events = [
        ("lifecycle_started", {"plan": "training"}),
        *BOUND,
        ("step_completed", {"step": 1}),
        ("step_completed", {"step": 2}),
        ("transition_started", {"trigger": "x"}),
        ("lifecycle_shutdown", {}),
    ]
    _write(path, events, "int_trigger", len(events) - 2)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-4] + lines[-3:]))
    result = audit([str(path)], jobs=1)
    expected = _one_by_one(path)
    assert expected[0] == "error" and "trigger" in expected[1]
    assert ([str(e) for e in result.errors], result.records) == ([expected[1]], expected[2])


def test_each_handler_reads_its_events_struct_and_the_batch_reader_decodes_its_fields() -> None:
    """A handler reads the attributes of its event's struct (`AUDIT_READ_TYPES`, mypy holds each read
    to it); the batch path decodes the same fields, so a handler gets them on both paths."""
    assert HANDLERS.keys() == AUDIT_READ_TYPES.keys()
    for event, handler in HANDLERS.items():
        declared = inspect.signature(handler).parameters["rec"].annotation  # a string: postponed annotations
        assert eval(declared, handler.__globals__) is AUDIT_READ_TYPES[event], event
    batch = {t.__struct_config__.tag: set(t.__struct_fields__) for t in RECORD_TYPES}
    assert [event for event, names in READS.items() if not set(names) <= batch[event]] == []


def test_a_typed_record_refuses_a_field_its_handler_did_not_declare() -> None:
    line = (
        b'{"event":"transition_started","generation":0,"hash":"'
        + b"a" * 64
        + b'","prev_hash":"'
        + b"0" * 64
        + b'","rank":0,"run_id":"r","seq":1,"trigger":"validate","ts":1.0,"world_size":1}'
    )
    rec = decode_typed(line)
    assert rec.trigger == "validate" and rec.event == "transition_started"
    with pytest.raises(AttributeError):
        rec.dest  # noqa: B018 - the attribute read is the test
    assert len(RECORD_TYPES) == len({t.__struct_config__.tag for t in RECORD_TYPES})


@pytest.mark.parametrize("text", [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80"])
def test_invalid_utf8_in_a_field_no_handler_reads_is_not_json(tmp_path: Path, text: bytes) -> None:
    """msgspec does not check the text of a field it skips; the audit must still refuse the line."""
    path = tmp_path / "rank-00003.jsonl"
    _write(path, [("lifecycle_started", {"plan": "training"}), ("services_ready", {"tokenizer": "T"})], "none", 0)
    lines = path.read_bytes().splitlines()
    lines[1] = lines[1].replace(b'"tokenizer":"T"', b'"tokenizer":"' + text + b'"')
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = audit([str(path)], jobs=1)
    assert [str(e) for e in result.errors] and "not a JSON record" in str(result.errors[0])


_SIX = [("lifecycle_started", {"plan": "training"}), *[("transition_started", {"trigger": "validate"})] * 5]


@pytest.mark.parametrize(
    ("mangle", "line"),
    [
        (lambda ls: [*ls[:2], ls[2] + b"," + ls[3], *ls[4:]], 3),  # two records on one line
        (lambda ls: [*ls[:2], ls[2] + b",{", ls[3][1:], *ls[4:]], 3),  # a record split across two lines
        (lambda ls: [*ls[:2], ls[2][:-1], b"}", *ls[3:]], 3),  # a record's last brace on a line of its own
    ],
)
def test_a_line_that_is_not_exactly_one_record_is_refused_at_its_line(tmp_path: Path, mangle: Any, line: int) -> None:
    """The batch reader decodes a file's lines as one array; a line that is not one record must
    still be refused at its own line, as reading it alone refuses it, not paired up with another."""
    path = tmp_path / "rank-00003.jsonl"
    _write(path, _SIX, "none", 0)
    path.write_bytes(b"\n".join(mangle(path.read_bytes().splitlines())) + b"\n")
    result = audit([str(path)], jobs=1)
    assert len(result.errors) == 1 and str(result.errors[0]).startswith(f"{path}:{line}: not a JSON record")
