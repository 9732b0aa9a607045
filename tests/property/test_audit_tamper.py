"""Any single record of an engine-made log changed, removed or moved is detected by the audit."""

from __future__ import annotations

import sys
import tempfile
from functools import cache
from pathlib import Path

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "audit"))

from audit_logs import engine_rank, train_and_shut_down

from lifecycle.audit import audit
from states import State

_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@cache
def engine_log() -> tuple[bytes, ...]:
    """One rank through startup, a rebuild, steps and shutdown, written by the real engine."""
    log_dir = Path(tempfile.mkdtemp(prefix="audit-tamper-"))
    lc = engine_rank(log_dir)
    lc.advance_to(State.CALLBACKS_BOUND)
    lc.rebuild()
    train_and_shut_down(lc)
    return tuple((log_dir / "rank-00000.jsonl").read_bytes().splitlines(keepends=True))


def detected(lines: list[bytes]) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rank-00000.jsonl"
        path.write_bytes(b"".join(lines))
        result = audit([str(path)], jobs=1)
    return result.exit_code != 0


def test_the_untouched_engine_log_is_clean() -> None:
    assert not detected(list(engine_log()))


VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), st.text(max_size=20)
)


@_SETTINGS
@given(data=st.data())
def test_changing_any_field_of_any_record_is_detected(data: st.DataObject) -> None:
    lines = list(engine_log())
    i = data.draw(st.integers(0, len(lines) - 1), label="record")
    record = orjson.loads(lines[i])
    key = data.draw(st.sampled_from(sorted(record)), label="field")
    new = data.draw(VALUES.filter(lambda v: orjson.dumps(v) != orjson.dumps(record[key])), label="value")
    record[key] = new
    lines[i] = orjson.dumps(record) + b"\n"
    assert detected(lines)


@_SETTINGS
@given(data=st.data())
def test_removing_any_record_is_detected(data: st.DataObject) -> None:
    lines = list(engine_log())
    del lines[data.draw(st.integers(0, len(lines) - 1), label="record")]
    assert detected(lines)


@_SETTINGS
@given(data=st.data())
def test_moving_any_record_elsewhere_is_detected(data: st.DataObject) -> None:
    lines = list(engine_log())
    i = data.draw(st.integers(0, len(lines) - 1), label="from")
    j = data.draw(st.integers(0, len(lines) - 1).filter(lambda j: j != i), label="to")
    lines.insert(j, lines.pop(i))
    assert detected(lines)
