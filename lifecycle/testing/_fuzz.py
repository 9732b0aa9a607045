"""Fuzz a lifecycle with Hypothesis: a `RuleBasedStateMachine` over the real engine.

    from lifecycle.testing import lifecycle_state_machine
    TestMine = lifecycle_state_machine(config=my_config, provider=my_provider).TestCase

Rules fire every trigger, legal and illegal, and call tripwired functions from "user code"; after
each step the invariants read the log back and check it (see `check_log`). Needs the `fuzz` extra
(hypothesis). Runs with the in-process phases unless `phases_factory` says otherwise.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import orjson

from lifecycle.audit import LOG_ORDERING
from lifecycle.audit._ordering import SHOWN_BY
from lifecycle.audit._reads import READ_TYPES as AUDIT_READ_TYPES
from lifecycle.audit._reads import Envelope, LifecycleShutdown, ResourceLeaked
from lifecycle.config import RunConfig
from lifecycle.engine import InProcessPhases, Lifecycle, TripwirePolicy
from lifecycle.errors import LifecycleError
from lifecycle.log import ChainVerifier, JSONValue, events
from lifecycle.log.records import Record, TransitionCompleted
from lifecycle.log.schema import SCHEMA, not_of_type
from lifecycle.runtime import GivenProvider, Options, PhaseSet
from states import STARTUP_ORDER, TABLE, State, Trigger, find, releases

if TYPE_CHECKING:
    from hypothesis.stateful import RuleBasedStateMachine


def read_log(path: Path) -> list[dict[str, JSONValue]]:
    """The records of a log file, as JSON objects."""
    with open(path, "rb") as handle:
        return [orjson.loads(line) for line in handle if line.strip()]


def leaked(records: Iterable[Mapping[str, JSONValue]]) -> list[tuple[str, str]]:
    """(state, resource) of every resource a log says was alive after its release: `resource_leaked`
    records (a rebuild, a restart) and the shutdown record's `leaked`, each read as the audit reads
    it (`msgspec.ValidationError` for one whose field has another type)."""
    out = []
    for given in records:
        event = msgspec.convert(given, Envelope).event
        if event != events.RESOURCE_LEAKED and event != events.LIFECYCLE_SHUTDOWN:
            continue
        match msgspec.convert(given, AUDIT_READ_TYPES[event]):
            case ResourceLeaked(state=state, resource=resource):
                out.append((str(state), str(resource)))
            case LifecycleShutdown(leaked=found) if found is not None:
                out += [(str(e.get("state")), str(e.get("resource"))) for e in found]
    return out


def reachable_states() -> frozenset[State]:
    """States the table can reach from CONFIGURED."""
    seen, todo = {STARTUP_ORDER[0]}, [STARTUP_ORDER[0]]
    while todo:
        state = todo.pop()
        for row in TABLE:
            if state in row.sources and row.dest not in seen:
                seen.add(row.dest)
                todo.append(row.dest)
    return frozenset(seen)


def check_log(records: Iterable[Mapping[str, object]]) -> list[str]:
    """Problems with one rank's records: each read as its event's type (`lifecycle.log.schema`; one
    that is not is a problem naming the event and the field), hash chain, path through the table,
    ordering rules (those of `states.ORDERING` a log can show, as `lifecycle.audit.LOG_ORDERING`
    reads them)."""
    problems: list[str] = []
    chain = ChainVerifier()
    held: set[State] = set()  # the states whose work the records show exists, not released since
    state = STARTUP_ORDER[0].name
    for i, given in enumerate(records):
        if chain.check(given) is not None:
            problems.append(f"record {i}: hash chain broken")
        rec = _typed(i, given, problems)
        if rec is None:
            continue
        event = _tag(rec)
        for rule in LOG_ORDERING.get(event, ()):
            if rule.needs not in held and rule.applies(kind := getattr(rec, "kind", None)):
                problems.append(f"record {i}: {rule.what(kind)} before {rule.needs.name}")
        if event in SHOWN_BY:
            held.add(SHOWN_BY[event])
        if isinstance(rec, TransitionCompleted):
            state = _followed(i, rec, state, problems)
            held = {work for work in held if not releases(Trigger(rec.trigger), work)}
    return problems


def _tag(rec: Record) -> str:
    return str(type(rec).__struct_config__.tag)


def _typed(i: int, rec: Mapping[str, object], problems: list[str]) -> Record | None:
    """Record `rec` as its event's type; None, and a problem, when it is not one."""
    given = dict(rec)
    event = msgspec.convert(given, Envelope).event  # its tag, as the record holds it
    cls = SCHEMA.get(event) if type(event) is str else None
    if cls is None:
        problems.append(f"record {i}: event {str(event)[:60]!r} is not a startup-log event")
        return None
    try:
        return msgspec.convert(given, cls)
    except msgspec.ValidationError as error:
        problems.append(f"record {i}: {not_of_type(str(event), rec, error)}")
        return None


def _followed(i: int, rec: TransitionCompleted, state: str, problems: list[str]) -> str:
    """The state a `transition_completed` record moves to; a problem when the table has no such step."""
    row = find(State[rec.source], Trigger(rec.trigger)) if rec.source in State.__members__ else None
    if rec.source != state or row is None or row.dest.name != rec.dest:
        problems.append(f"record {i}: {rec.source} -{rec.trigger}-> {rec.dest} is not a table path")
    return rec.dest


def fire_and_check(lc: Lifecycle, trigger: Trigger) -> None:
    """Fire `trigger`; a refusal leaves the state (or FAILED), an acceptance needs a table row."""
    before = lc.state
    try:
        lc.fire(trigger)
    except LifecycleError:
        row = find(before, trigger)
        assert row is None or lc.state in (before, State.FAILED), (before, trigger, lc.state)
    else:
        assert find(before, trigger) is not None or (trigger is Trigger.SHUTDOWN and before is State.SHUT_DOWN)


def seed_and_check(lc: Lifecycle, *, guarded: bool) -> None:
    """User code seeds the RNG: refused exactly when the tripwires guard the current state."""
    import torch

    try:
        torch.manual_seed(0)
    except LifecycleError:
        assert guarded, f"tripwire fired in {lc.state.name}, after startup completed"
    else:
        assert not guarded, f"torch.manual_seed was not refused in {lc.state.name}"


def check_written_log(lc: Lifecycle) -> None:
    """The records are a valid path, and the file holds exactly them (once it is open)."""
    records = lc.records
    assert check_log(records) == []
    path = lc.log_path
    if path is not None and lc.state is not State.SHUT_DOWN:
        written = read_log(path)
        assert written == records[: len(written)] and len(written) == len(records)


def lifecycle_state_machine(
    config: RunConfig | None = None,
    provider: GivenProvider = None,
    phases_factory: Callable[[], PhaseSet] = InProcessPhases,
    tripwires: TripwirePolicy = "raise",
) -> type[RuleBasedStateMachine]:
    """A Hypothesis RuleBasedStateMachine class driving a fresh Lifecycle per example."""
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

    cfg = config or RunConfig()
    reachable = reachable_states()

    class LifecycleMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.dir, self.lc = _fresh(cfg, provider, phases_factory, tripwires)

        @rule(trigger=st.sampled_from(list(Trigger)))
        def fire(self, trigger: Trigger) -> None:
            fire_and_check(self.lc, trigger)

        @rule()
        def user_code_seeds_the_rng(self) -> None:
            _seed_where_guarded(self.lc, tripwires)

        @invariant()
        def state_is_reachable(self) -> None:
            assert self.lc.state in reachable

        @invariant()
        def log_is_a_valid_path(self) -> None:
            check_written_log(self.lc)

        def teardown(self) -> None:
            self.lc.shutdown()
            self.dir.cleanup()

    return LifecycleMachine


def _fresh(
    config: RunConfig, provider: GivenProvider, phases_factory: Callable[[], PhaseSet], tripwires: TripwirePolicy
) -> tuple[tempfile.TemporaryDirectory[str], Lifecycle]:
    """One example's lifecycle, keeping its records, with its own temporary log directory."""
    where = tempfile.TemporaryDirectory(prefix="lifecycle-fuzz-")
    options = Options(keep_records=True)
    return where, Lifecycle(config, provider, where.name, phases=phases_factory(), tripwires=tripwires, options=options)


def _seed_where_guarded(lc: Lifecycle, tripwires: TripwirePolicy) -> None:
    # tripwires guard the startup only: not at the target, nor in FAILED or SHUT_DOWN
    settled = (lc.target, State.FAILED, State.SHUT_DOWN)
    seed_and_check(lc, guarded=lc.state not in settled and tripwires == "raise")
