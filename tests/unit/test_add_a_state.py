"""Adding a state to the main chain: the states package, and a phase registered for the new state;
nothing in the engine, the log or the audit changes (docs/extending.md counts the files).

The test writes a copy of `states/` with one more state after the last of the chain, WARMED_UP,
entered by `warm_up`, made the target of the training plan (a plan whose target moved). The name is
one no real extension takes (docs/extending.md measured adding DATA_READY / `load_data`). The copy's
edits anchor on what any chain has (the first state after the chain, FAILED; the first release
trigger, REBUILD) and extend `STARTUP_ORDER`, `PLAN_TARGETS` and `TABLE` at the end of their
modules, so a state added to the real chain does not break them. A child process that imports that
copy instead of the real one drives it end to end with the in-process phases, a phase registered for
WARMED_UP, and audits the logs: a clean run has no finding; a step logged at CALLBACKS_BOUND (no
longer where the plan trains) is LA030; a step on a rebuilt model that was not bound again is
LA004. With no phase registered for WARMED_UP, the in-process phases pass through it and the run
is as clean. One child process for all of it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lifecycle.testing import RuleId
from states import STARTUP_ORDER
from tests.child_python import last_json_of

ROOT = Path(__file__).resolve().parents[2]
CHAIN = [s.name for s in STARTUP_ORDER]
"""The real chain, which the copy extends by WARMED_UP."""

EDITS = {
    "_enums.py": [
        ('    FAILED = "FAILED"\n', '    WARMED_UP = "WARMED_UP"\n    FAILED = "FAILED"\n'),
        ('    REBUILD = "rebuild"\n', '    WARM_UP = "warm_up"\n    REBUILD = "rebuild"\n'),
    ],
}
APPENDED = {
    "_enums.py": """
STARTUP_ORDER = (*STARTUP_ORDER, State.WARMED_UP)
PLAN_TARGETS[Plan.TRAINING] = State.WARMED_UP
""",
    # every row that leaves the chain's old last state (a release, a failure, the shutdown) leaves the
    # new one too, and a row enters the new one from it
    "_table.py": """
import dataclasses as _dataclasses

_BEFORE = STARTUP_ORDER[-2]
TABLE = (
    *(
        _dataclasses.replace(row, sources=(*row.sources, State.WARMED_UP))
        if _BEFORE in row.sources and State.WARMED_UP not in row.sources
        else row
        for row in TABLE
    ),
    Transition(
        sources=(_BEFORE,),
        trigger=Trigger.WARM_UP,
        dest=State.WARMED_UP,
        guards=(plan_reaches_destination,),
        doc="Warm up.",
    ),
)
""",
}

CHILD = r'''
import dataclasses, json, sys
from pathlib import Path
from types import MappingProxyType

from lifecycle import InProcessPhases, Lifecycle, RunConfig
from lifecycle.audit import audit
from lifecycle.log.records import FirstStepFinalized, StepCompleted
from lifecycle.testing import check_written_log
from states import STARTUP_ORDER, State, kept_by, rebinds, trains_in, Plan, Trigger

calls = []


from lifecycle.runtime import Slot

WARM = Slot("warm", str)


class WarmedUp:
    """The new state's phase: warms up (a runtime slot of its own), forgets it on release."""

    def enter(self, ctx):
        calls.append("enter")
        return ctx.runtime.with_slot(WARM, "warm")

    def release(self, ctx):
        calls.append("release")
        return ctx.runtime.without_slot(WARM)


def lifecycle(log_dir):
    phases = InProcessPhases().register(State.WARMED_UP, WarmedUp())
    return Lifecycle(RunConfig(), log_dir=log_dir, phases=phases, options={"keep_records": True})


def step(lc, n):
    """A binding's first step, with the first-step watchdog's record."""
    lc.record(StepCompleted(step=n, loss=1.0, duration_s=0.01))
    lc.record(FirstStepFinalized(finalizer_calls=1))


def findings(log_dir):
    result = audit([str(log_dir)], jobs=1)
    assert not result.errors, result.errors
    return sorted({f.rule for f in result.findings})


out = {"order": [s.name for s in STARTUP_ORDER], "trains_in": trains_in(Plan.TRAINING).name,
       "rebuild_keeps": kept_by(Trigger.REBUILD).name, "rebinds": sorted(t.value for t in Trigger if rebinds(t))}
root = Path(sys.argv[1])

def drive(lc, warm):
    """Startup, a rebuild, a restart, a step after each, the shutdown; the states entered. `warm` gets
    the new state's slot at the target and after the rebuild."""
    lc.advance_to(lc.target)
    warm.append(lc.runtime.slot(WARM))
    step(lc, 1)
    lc.rebuild()
    warm.append(lc.runtime.slot(WARM))
    lc.advance_to(lc.target)
    step(lc, 2)
    lc.restart()
    lc.advance_to(lc.target)
    step(lc, 3)
    check_written_log(lc)
    lc.shutdown()
    return [r["dest"] for r in lc.records if r["event"] == "transition_completed"]


lc = lifecycle(root / "clean")
out["target"] = lc.target.name
out["states"] = drive(lc, warm := [])
out["warm_at_target"], out["warm_after_rebuild"] = warm
out["calls"] = list(calls)
out["clean"] = findings(root / "clean")

lc = lifecycle(root / "early-step")
lc.advance_to(State.CALLBACKS_BOUND)
step(lc, 1)  # bound, but the plan trains at WARMED_UP
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

# no phase registered for WARMED_UP: the in-process phases pass through it
try:
    lc = Lifecycle(RunConfig(), log_dir=root / "pass-through", phases=InProcessPhases(), options={"keep_records": True})
    out["pass_through"] = drive(lc, [])
    out["pass_through_clean"] = findings(root / "pass-through")
except Exception as exc:
    out["pass_through"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
'''


def _states_with_a_new_state(where: Path) -> Path:
    copy = where / "states"
    shutil.copytree(ROOT / "states", copy, ignore=shutil.ignore_patterns("__pycache__"))
    for name in EDITS.keys() | APPENDED.keys():
        text = (copy / name).read_text()
        for old, new in EDITS.get(name, []):
            assert text.count(old) == 1, f"states/{name} changed: update this test's edit of {old!r}"
            text = text.replace(old, new)
        (copy / name).write_text(text + APPENDED.get(name, ""))
    return copy


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    where = tmp_path_factory.mktemp("added-state")
    _states_with_a_new_state(where)
    result: dict[str, object] = last_json_of(CHILD, str(where / "logs"), first_on_path=where)
    return result


def test_the_new_state_is_in_the_chain_and_the_derived_facts_follow_the_table(run: dict[str, object]) -> None:
    assert run["order"] == [*CHAIN, "WARMED_UP"]
    assert (run["target"], run["trains_in"]) == ("WARMED_UP", "WARMED_UP")
    assert run["rebuild_keeps"] == "DISTRIBUTED" and run["rebinds"] == ["rebuild", "restart"]


def test_the_new_state_is_driven_end_to_end_with_the_in_process_phases(run: dict[str, object]) -> None:
    startup = [*CHAIN[1:], "WARMED_UP"]
    after_rebuild = startup[startup.index("DISTRIBUTED") + 1 :]
    assert run["states"] == [*startup, "DISTRIBUTED", *after_rebuild, *startup, "SHUT_DOWN"]
    assert run["warm_at_target"] == "warm" and run["warm_after_rebuild"] is None
    # entered three times, released by the rebuild, the restart and the shutdown
    assert run["calls"] == ["enter", "release", "enter", "release", "enter", "release"]
    assert run["clean"] == []


def test_a_new_state_with_no_light_phase_of_its_own_is_passed_through_by_the_in_process_phases(
    run: dict[str, object],
) -> None:
    startup = [*CHAIN[1:], "WARMED_UP"]
    after_rebuild = startup[startup.index("DISTRIBUTED") + 1 :]
    assert run["pass_through"] == [*startup, "DISTRIBUTED", *after_rebuild, *startup, "SHUT_DOWN"]
    assert run["pass_through_clean"] == []


def test_a_plan_whose_target_moved_gets_the_training_rules_at_its_new_target(run: dict[str, object]) -> None:
    assert run["early_step"] == [RuleId.STEP_WITHOUT_BINDING]
    assert RuleId.REBUILD_WITHOUT_REBIND in run["no_rebind"]  # type: ignore[operator]
