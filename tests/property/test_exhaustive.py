"""Breadth-first walk over every trigger sequence of the table (by abstract state) to depth >= 12.

Abstract state = the engine state plus what the runtime holds (validated, services, distributed,
model, generation > 0). Each abstract state is reached on the real engine by its shortest trigger
path; from there every trigger is fired, outcomes checked, and new abstract states queued.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections import deque

import pytest

from lifecycle import InProcessPhases, Lifecycle, LifecycleError, RunConfig
from lifecycle.testing import check_log, find, reachable_states
from states import PLAN_TARGETS, Plan, State, Trigger

DEPTH = 12


def _abstract(lc: Lifecycle) -> tuple[object, ...]:
    rt = lc.runtime
    return (
        lc.state,
        rt.validated,
        rt.services_ready,
        rt.distributed,
        rt.model is not None,
        rt.binding is not None,
        rt.generation > 0,
    )


def _replay(plan: Plan, path: tuple[Trigger, ...], log_dir: str) -> Lifecycle:
    # the probes reuse one log directory, one run after another
    config = RunConfig.from_dict({"logging": {"existing": "overwrite"}})
    lc = Lifecycle(
        config, log_dir=log_dir, plan=plan, phases=InProcessPhases(), tripwires="off", options={"keep_records": True}
    )
    for trigger in path:
        with contextlib.suppress(LifecycleError):
            lc.fire(trigger)
    return lc


def _check(lc: Lifecycle) -> None:
    assert lc.state in reachable_states()
    assert check_log(lc.records) == []
    rt = lc.runtime
    if lc.state is State.CALLBACKS_BOUND:
        assert rt.binding is not None and rt.model is not None
    if rt.binding is not None:
        assert rt.model is not None, "binding without a model"
    if rt.services_ready or rt.distributed:
        assert rt.validated, "side effects without a validated config"
    if lc.state.startup_index > PLAN_TARGETS[lc.plan].startup_index:
        raise AssertionError(f"{lc.plan} went past its target to {lc.state}")


@pytest.mark.parametrize("plan", list(Plan), ids=lambda p: p.value)
def test_every_trigger_sequence_to_depth_12_keeps_the_invariants(plan: Plan) -> None:
    seen: dict[tuple[object, ...], tuple[Trigger, ...]] = {}
    queue: deque[tuple[Trigger, ...]] = deque([()])
    edges = 0
    with tempfile.TemporaryDirectory() as tmp:
        while queue:
            path = queue.popleft()
            lc = _replay(plan, path, f"{tmp}/{len(seen)}")
            key = _abstract(lc)
            if key in seen:
                lc.shutdown()
                continue
            seen[key] = path
            _check(lc)
            lc.shutdown()
            if len(path) >= DEPTH:
                continue
            for trigger in Trigger:
                probe = _replay(plan, path, f"{tmp}/p")
                before = probe.state
                try:
                    probe.fire(trigger)
                except LifecycleError:
                    assert probe.state in (before, State.FAILED)
                else:
                    assert find(before, trigger) is not None or before is State.SHUT_DOWN
                _check(probe)
                edges += 1
                probe.shutdown()
                queue.append((*path, trigger))
    states = {key[0] for key in seen}
    assert State.SHUT_DOWN in states and State.FAILED in states
    assert PLAN_TARGETS[plan] in states
    assert edges >= 9 * len(seen) - 9 * sum(1 for p in seen.values() if len(p) >= DEPTH)
