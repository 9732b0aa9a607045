"""The ordering rules are one description (`states.ORDERING`) that the engine's guards, the audit and
the fuzzer's `check_log` all read: the table enforces each rule, and a rule changed in a copy of
`states/` changes what all three say, with no other edit (one child process)."""

from __future__ import annotations

import dataclasses
import inspect
import shutil
from pathlib import Path
from typing import Any

import pytest

from lifecycle.audit import LOG_ORDERING
from lifecycle.log import events
from lifecycle.testing import (
    BINDING_NEEDS_A_MODEL,
    DISTRIBUTED_NEEDS_SERVICES,
    MODEL_NEEDS_DISTRIBUTED,
    SHOWN_BY,
    SIDE_EFFECTS_NEED_VALIDATION,
    RuleId,
)
from states import (
    ORDERING,
    SIDE_EFFECT_OWNERS,
    STARTUP_ORDER,
    TABLE,
    Facts,
    Ordering,
    SideEffect,
    State,
    Trigger,
    made_in,
    requiring,
    rule,
    unmet,
)
from tests.child_python import last_json_of

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("ordering", ORDERING, ids=lambda o: o.guard)
def test_the_table_enforces_each_rule_on_the_way_to_every_side_effect_it_constrains(ordering: Ordering) -> None:
    """For each kind the rule constrains, some forward row between `needs` and the state that makes
    that kind carries the rule's guard: the engine cannot make it before `needs`."""
    forward = {row.dest: row for row in TABLE if row.keeps is None and row.dest in STARTUP_ORDER}
    for kind in ordering.kinds:
        made = made_in(kind)
        assert made.startup_index > ordering.needs.startup_index, (ordering.guard, kind)
        on_the_way = [forward[s] for s in STARTUP_ORDER[ordering.needs.startup_index + 1 : made.startup_index + 1]]
        assert ordering.guard in {guard.__name__ for row in on_the_way for guard in row.guards}, (ordering.guard, kind)


@pytest.mark.parametrize("ordering", ORDERING, ids=lambda o: o.guard)
def test_each_rules_guard_is_the_tables_and_says_the_rule(ordering: Ordering) -> None:
    [guard] = {guard for row in TABLE for guard in row.guards if guard.__name__ == ordering.guard}
    assert rule(guard) == ordering.says
    facts = Facts(state=State.CONFIGURED, trigger=Trigger.VALIDATE)
    assert not guard(facts) and not facts.has(ordering.needs)
    held = dataclasses.replace(facts, config_validated=True, services_ready=True, distributed=True, model_built=True)
    assert guard(held) and held.has(ordering.needs)


def test_a_rule_of_the_tests_own_makes_a_guard_that_reads_it() -> None:
    extra = Ordering(
        needs=State.DISTRIBUTED,
        kinds=frozenset({SideEffect.TOKENIZER}),
        guard="tokenizer_after_distributed",
        says="A test-only rule: the tokenizer is made only once process groups exist.",
    )
    guard = requiring(extra)
    assert (guard.__name__, rule(guard)) == (extra.guard, extra.says)
    facts = Facts(state=State.VALIDATED, trigger=Trigger.START_SERVICES, config_validated=True)
    assert not guard(facts) and guard(dataclasses.replace(facts, distributed=True))
    with pytest.raises(ValueError, match="Facts hold nothing for CALLBACKS_BOUND"):
        requiring(dataclasses.replace(extra, needs=State.CALLBACKS_BOUND))


def test_the_rules_with_an_audit_id_are_the_audits_and_check_logs() -> None:
    ids = {o.id for o in ORDERING if o.id is not None}
    assert ids == {RuleId.SIDE_EFFECT_BEFORE_VALIDATED, RuleId.BINDING_BEFORE_MODEL_BUILT}
    in_logs = {found.id: found for rules in LOG_ORDERING.values() for found in rules}
    assert set(in_logs) == ids
    la001, la002 = in_logs[RuleId.SIDE_EFFECT_BEFORE_VALIDATED], in_logs[RuleId.BINDING_BEFORE_MODEL_BUILT]
    # every kind of side effect: any side_effect record; the binding: its own record
    assert (la001.record, la001.kinds, la001.needs) == (events.SIDE_EFFECT, None, State.VALIDATED)
    assert (la002.record, la002.kinds, la002.needs) == (events.CALLBACKS_BOUND, None, State.MODEL_BUILT)
    assert SHOWN_BY == {events.CONFIG_VALIDATED: State.VALIDATED, events.MODEL_BUILT: State.MODEL_BUILT}
    assert SIDE_EFFECTS_NEED_VALIDATION.kinds == frozenset(SIDE_EFFECT_OWNERS)


# -- one rule changed: the guard, the audit and check_log change with it -------------------------------

RULE = "    needs=State.VALIDATED,\n    kinds=frozenset(SideEffect),\n"
CHANGED = "    needs=State.MODEL_BUILT,\n    kinds=frozenset(SideEffect),\n"


def observe(logs: str, scratch: str) -> dict[str, Any]:
    """What the three readers say: the audit and check_log of the log in `logs`, and the engine's
    guard on start_services after validate (`scratch` holds that lifecycle's log)."""
    from lifecycle import GuardRejected, InProcessPhases, Lifecycle, RunConfig
    from lifecycle.audit import audit
    from lifecycle.testing import check_log, read_log

    result = audit([logs], jobs=1)
    [path] = sorted(Path(logs).glob("rank-*.jsonl"))
    out: dict[str, Any] = {
        "audit": sorted({(f.rule, f.message) for f in result.findings}),
        "check_log": check_log(read_log(path)),
        "guard": None,
    }
    lc = Lifecycle(RunConfig(), log_dir=scratch, phases=InProcessPhases(), tripwires="off")
    lc.validate()
    try:
        lc.start_services()
    except GuardRejected as refused:
        out["guard"] = [refused.context["guard"], refused.context["reason"]]
    lc.shutdown()
    return out


CHILD = (
    "\n".join(["import json, sys", "from pathlib import Path", "from typing import Any", inspect.getsource(observe)])
    + "\nprint(json.dumps(observe(sys.argv[1], sys.argv[2])))\n"
)


def _mutated_states(where: Path) -> None:
    copy = where / "states"
    shutil.copytree(ROOT / "states", copy, ignore=shutil.ignore_patterns("__pycache__"))
    text = (copy / "_ordering.py").read_text()
    assert text.count(RULE) == 1, "states/_ordering.py changed: update this test's edit of LA001"
    (copy / "_ordering.py").write_text(text.replace(RULE, CHANGED))


def test_a_rule_changed_in_states_changes_the_guard_the_audit_and_check_log(tmp_path: Path) -> None:
    """LA001 made to need MODEL_BUILT instead of VALIDATED, in a copy of `states/` only: the engine
    refuses start_services by the rule's guard, and a log that was clean (services' side effects
    after VALIDATED, before MODEL_BUILT) is LA001 to the audit and a problem to check_log."""
    from lifecycle import InProcessPhases, Lifecycle, RunConfig

    logs = tmp_path / "clean"
    lc = Lifecycle(RunConfig(), log_dir=logs, phases=InProcessPhases(), tripwires="off")
    lc.advance_to(State.CALLBACKS_BOUND)
    lc.shutdown()
    assert observe(str(logs), str(tmp_path / "here")) == {"audit": [], "check_log": [], "guard": None}

    _mutated_states(tmp_path)
    there = last_json_of(CHILD, str(logs), str(tmp_path / "there"), first_on_path=tmp_path)
    assert there["guard"] == ["config_is_validated", SIDE_EFFECTS_NEED_VALIDATION.says]
    assert {finding_rule for finding_rule, _ in there["audit"]} == {RuleId.SIDE_EFFECT_BEFORE_VALIDATED}
    [(_, message)] = there["audit"]
    assert "(trigger 'start_services') in state VALIDATED, before any model_built record" in message
    first = message.split("'")[1]  # the first side effect's kind
    assert there["check_log"] and all(p.endswith(" before MODEL_BUILT") for p in there["check_log"])
    assert there["check_log"][0].split(": ", 1)[1] == f"side effect {first} before MODEL_BUILT"


# -- the engine's side-effect rules read the same rules ------------------------------------------------

MODEL_RULE = "    kinds=frozenset({SideEffect.MODEL}),\n"
WIDENED = "    kinds=frozenset({SideEffect.MODEL, SideEffect.TOKENIZER}),\n"

SIDE_EFFECT_CHILD = """
import json
from lifecycle import InProcessPhases, Lifecycle, RunConfig
from lifecycle.errors import SideEffectError
lc = Lifecycle(RunConfig(), log_dir=__import__("sys").argv[1], phases=InProcessPhases(), tripwires="off")
lc.validate()
try:
    lc.start_services()
    out = None
except SideEffectError as refused:
    out = [type(refused).__name__, str(refused).split(" The lifecycle")[0]]
lc.shutdown()
print(json.dumps(out))
"""


def test_a_kind_added_to_a_rule_in_states_is_refused_by_the_engines_side_effect_rules(tmp_path: Path) -> None:
    """MODEL_NEEDS_DISTRIBUTED widened to the tokenizer, in a copy of `states/` only: its guard is
    unchanged (start_services passes it), but the tokenizer that start_services declares is refused
    by the engine's side-effect rules, naming the rule: they read `states.ORDERING` (`states.unmet`)."""
    assert last_json_of(SIDE_EFFECT_CHILD, str(tmp_path / "here"), first_on_path=ROOT) is None
    copy = tmp_path / "states"
    shutil.copytree(ROOT / "states", copy, ignore=shutil.ignore_patterns("__pycache__"))
    text = (copy / "_ordering.py").read_text()
    assert text.count(MODEL_RULE) == 1, "states/_ordering.py changed: update this test's edit"
    (copy / "_ordering.py").write_text(text.replace(MODEL_RULE, WIDENED))
    there = last_json_of(SIDE_EFFECT_CHILD, str(tmp_path / "there"), first_on_path=tmp_path)
    says = next(o.says for o in ORDERING if o.guard == "distributed_is_initialized")
    assert there == ["SideEffectError", f"refused: tokenizer before DISTRIBUTED: {says}"]


def test_unmet_names_the_first_rule_a_side_effect_breaks_validation_first() -> None:
    nothing = Facts(state=State.CONFIGURED, trigger=Trigger.VALIDATE)
    assert unmet(SideEffect.MODEL, nothing) is SIDE_EFFECTS_NEED_VALIDATION
    validated = dataclasses.replace(nothing, config_validated=True)
    assert unmet(SideEffect.TOKENIZER, validated) is None
    assert unmet(SideEffect.RNG, validated) is DISTRIBUTED_NEEDS_SERVICES
    assert unmet(SideEffect.MODEL, dataclasses.replace(validated, services_ready=True)) is MODEL_NEEDS_DISTRIBUTED
    everything = dataclasses.replace(validated, services_ready=True, distributed=True, model_built=True)
    assert all(unmet(kind, everything) is None for kind in SideEffect)
    assert unmet(SideEffect.CALLBACKS, dataclasses.replace(everything, model_built=False)) is BINDING_NEEDS_A_MODEL
