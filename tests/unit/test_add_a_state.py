"""Adding a state to the main chain: the states package, and a phase registered for the new state;
nothing in the engine, the log or the audit changes (docs/extending.md counts the files).

The test writes a copy of `states/` with one more state after CALLBACKS_BOUND, DATA_READY, entered
by `load_data`, made the target of the training plan (a plan whose target moved). A child process
that imports that copy instead of the real one drives it end to end with the in-process phases, a
phase registered for DATA_READY, and audits the logs: a clean run has no finding; a step logged at
CALLBACKS_BOUND (no longer where the plan trains) is LA030; a step on a rebuilt model that was not
bound again is LA004. One child process for all of it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lifecycle.testing import RuleId
from tests.child_python import last_json_of

ROOT = Path(__file__).resolve().parents[2]

EDITS = {
    "_enums.py": [
        (
            '    CALLBACKS_BOUND = "CALLBACKS_BOUND"\n',
            '    CALLBACKS_BOUND = "CALLBACKS_BOUND"\n    DATA_READY = "DATA_READY"\n',
        ),
        (
            '    BIND_CALLBACKS = "bind_callbacks"\n',
            '    BIND_CALLBACKS = "bind_callbacks"\n    LOAD_DATA = "load_data"\n',
        ),
        ("    State.CALLBACKS_BOUND,\n)", "    State.CALLBACKS_BOUND,\n    State.DATA_READY,\n)"),
        ("    Plan.TRAINING: State.CALLBACKS_BOUND,", "    Plan.TRAINING: State.DATA_READY,"),
    ],
    "_table.py": [
        (
            "        sources=(State.MODEL_BUILT, State.CALLBACKS_BOUND),\n",
            "        sources=(State.MODEL_BUILT, State.CALLBACKS_BOUND, State.DATA_READY),\n",
        ),
        (
            "State.MODEL_BUILT, State.CALLBACKS_BOUND, State.FAILED),",
            "State.MODEL_BUILT, State.CALLBACKS_BOUND, State.DATA_READY, State.FAILED),",
        ),
        (
            "    Transition(\n        sources=(State.MODEL_BUILT, State.CALLBACKS_BOUND",
            "    Transition(\n        sources=(State.CALLBACKS_BOUND,),\n        trigger=Trigger.LOAD_DATA,\n"
            "        dest=State.DATA_READY,\n        guards=(plan_reaches_destination,),\n"
            '        doc="Open the data iterators.",\n    ),\n'
            "    Transition(\n        sources=(State.MODEL_BUILT, State.CALLBACKS_BOUND",
        ),
    ],
}

CHILD = r'''
import dataclasses, json, sys
from pathlib import Path
from types import MappingProxyType

from lifecycle import InProcessPhases, Lifecycle, RunConfig
from lifecycle.audit import audit
from lifecycle.testing import check_written_log
from states import STARTUP_ORDER, State, kept_by, rebinds, trains_in, Plan, Trigger

calls = []


from lifecycle.runtime import Slot

DATA = Slot("data", str)


class DataReady:
    """The new state's phase: opens 'iterators' (in a runtime slot of its own), closes them on release."""

    def enter(self, ctx):
        calls.append("enter")
        return ctx.runtime.with_slot(DATA, "open")

    def release(self, ctx):
        calls.append("release")
        return ctx.runtime.without_slot(DATA)


def lifecycle(log_dir):
    phases = InProcessPhases().register(State.DATA_READY, DataReady())
    return Lifecycle(RunConfig(), log_dir=log_dir, phases=phases, options={"keep_records": True})


def step(lc, n):
    """A binding's first step, with the first-step watchdog's record."""
    lc.record("step_completed", step=n, loss=1.0, duration_s=0.01)
    lc.record("first_step_finalized", finalizer_calls=1)


def findings(log_dir):
    result = audit([str(log_dir)], jobs=1)
    assert not result.errors, result.errors
    return sorted({f.rule for f in result.findings})


out = {"order": [s.name for s in STARTUP_ORDER], "trains_in": trains_in(Plan.TRAINING).name,
       "rebuild_keeps": kept_by(Trigger.REBUILD).name, "rebinds": sorted(t.value for t in Trigger if rebinds(t))}
root = Path(sys.argv[1])

lc = lifecycle(root / "clean")
out["target"] = lc.target.name
lc.advance_to(lc.target)
out["data_at_target"] = lc.runtime.slot(DATA)
step(lc, 1)
lc.rebuild()
out["data_after_rebuild"] = lc.runtime.slot(DATA)
lc.advance_to(lc.target)
step(lc, 2)
lc.restart()
lc.advance_to(lc.target)
step(lc, 3)
check_written_log(lc)
lc.shutdown()
out["states"] = [r["dest"] for r in lc.records if r["event"] == "transition_completed"]
out["calls"] = list(calls)
out["clean"] = findings(root / "clean")

lc = lifecycle(root / "early-step")
lc.advance_to(State.CALLBACKS_BOUND)
step(lc, 1)  # bound, but the plan trains at DATA_READY
lc.shutdown()
out["early_step"] = findings(root / "early-step")

lc = lifecycle(root / "no-rebind")
lc.advance_to(lc.target)
step(lc, 1)
lc.rebuild()
lc.build_model()
step(lc, 2)  # the rebuilt model was never bound
lc.shutdown()
out["no_rebind"] = findings(root / "no-rebind")
print(json.dumps(out))
'''


def _states_with_a_new_state(where: Path) -> Path:
    copy = where / "states"
    shutil.copytree(ROOT / "states", copy, ignore=shutil.ignore_patterns("__pycache__"))
    for name, edits in EDITS.items():
        text = (copy / name).read_text()
        for old, new in edits:
            assert text.count(old) == 1, f"states/{name} changed: update this test's edit of {old!r}"
            text = text.replace(old, new)
        (copy / name).write_text(text)
    return copy


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    where = tmp_path_factory.mktemp("added-state")
    _states_with_a_new_state(where)
    result: dict[str, object] = last_json_of(CHILD, str(where / "logs"), first_on_path=where)
    return result


def test_the_new_state_is_in_the_chain_and_the_derived_facts_follow_the_table(run: dict[str, object]) -> None:
    assert run["order"] == [
        "CONFIGURED",
        "VALIDATED",
        "SERVICES_READY",
        "DISTRIBUTED",
        "MODEL_BUILT",
        "CALLBACKS_BOUND",
        "DATA_READY",
    ]
    assert (run["target"], run["trains_in"]) == ("DATA_READY", "DATA_READY")
    assert run["rebuild_keeps"] == "DISTRIBUTED" and run["rebinds"] == ["rebuild", "restart"]


def test_the_new_state_is_driven_end_to_end_with_the_in_process_phases(run: dict[str, object]) -> None:
    startup = ["VALIDATED", "SERVICES_READY", "DISTRIBUTED", "MODEL_BUILT", "CALLBACKS_BOUND", "DATA_READY"]
    assert run["states"] == [*startup, "DISTRIBUTED", *startup[3:], *startup, "SHUT_DOWN"]
    assert run["data_at_target"] == "open" and run["data_after_rebuild"] is None
    # entered three times, released by the rebuild, the restart and the shutdown
    assert run["calls"] == ["enter", "release", "enter", "release", "enter", "release"]
    assert run["clean"] == []


def test_a_plan_whose_target_moved_gets_the_training_rules_at_its_new_target(run: dict[str, object]) -> None:
    assert run["early_step"] == [RuleId.STEP_WITHOUT_BINDING]
    assert RuleId.REBUILD_WITHOUT_REBIND in run["no_rebind"]  # type: ignore[operator]
