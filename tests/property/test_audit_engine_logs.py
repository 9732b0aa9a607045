"""Whatever legal or illegal triggers a user fires at the real engine, the log it writes never
breaks a rule the engine enforces: the audit reports only what the user did (a failure that was not
recovered, a rebuilt model shut down unbound), never a false hash, ordering or binding finding."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "audit"))

from audit_logs import engine_rank

from lifecycle import InProcessPhases, LifecycleError
from lifecycle.audit import audit
from states import Plan, State, Trigger

USER_CAUSED = {"LA004", "LA013", "LA018"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plan=st.sampled_from([p.value for p in Plan]),
    triggers=st.lists(st.sampled_from([t for t in Trigger if t is not Trigger.SHUTDOWN]), max_size=14),
    fail_on=st.sampled_from([None, "start_services", "build_model", "bind_callbacks"]),
)
def test_engine_logs_only_ever_show_what_the_user_did(plan: str, triggers: list[Trigger], fail_on: str | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        lc = engine_rank(Path(tmp), plan=plan, phases=InProcessPhases(fail_on=fail_on))
        failed = rebuilt = False
        for trigger in [Trigger.VALIDATE, *triggers]:  # the log is written once the config validated
            try:
                lc.fire(trigger)
            except LifecycleError:
                failed = failed or lc.state is State.FAILED
            rebuilt = rebuilt or (trigger in (Trigger.REBUILD, Trigger.RESTART) and lc.state is not State.FAILED)
            if lc.state is lc.target:
                failed = False
        lc.shutdown()
        result = audit([tmp], jobs=1)
    found = {f.rule for f in result.findings}
    assert not result.errors and len(result.ranks) == 1
    assert found <= USER_CAUSED, result.findings
    if not failed and not rebuilt:
        assert "LA004" not in found
    if not failed and not any(t is Trigger.FAIL for t in triggers):
        assert "LA013" not in found
    assert ("LA018" in found) == ("LA013" in found)  # one rank: its failure is the root cause
