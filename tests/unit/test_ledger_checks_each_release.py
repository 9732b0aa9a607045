"""The ledger of what each state made (lifecycle.engine._ledger): which entries a release checks, in
which order, what a survivor logs and raises, and the restart cycles' records. In-process phases that
name a resource per state with a probe the test controls; tests/integration/test_restart.py runs the
real megatron resources through restarts.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from pathlib import Path
from typing import Any

import pytest

from lifecycle import InProcessPhases, ResourceLeak, Runtime
from lifecycle.testing import Ledger, LedgerEntry
from states import STARTUP_ORDER, State, Trigger, releases

ORDER = tuple(s for s in STARTUP_ORDER if releases(Trigger.RESTART, s))
"""The states whose work a restart releases (SERVICES_READY to the end of the chain), in order."""


class Resourceful(InProcessPhases):
    """Each forward state makes `<state> a` and `<state> b`; `alive` holds the names not yet gone.
    A state's release (its phase, wrapped) ends the two it made, except those in `leak`."""

    def __init__(self, *leak: str) -> None:
        super().__init__()
        self.alive: set[str] = set()
        self.leak = set(leak)
        for state in ORDER:
            self.around(state, release=functools.partial(self._released, state))

    def resources(self, state: State, runtime: Runtime) -> list[tuple[str, Any]]:
        made = [f"{state.name.lower()} {x}" for x in ("a", "b")]
        self.alive.update(made)
        return [(name, lambda name=name: name not in self.alive) for name in made]

    def _released(self, state: State, ctx: Any, release: Any) -> Runtime:
        runtime: Runtime = release(ctx)
        self.alive -= {n for n in self.alive if n.split()[0] == state.name.lower()} - self.leak
        return runtime


class Leaky(Resourceful):
    """Its releases forget `leak`."""


def events_of(lc: Any, name: str) -> list[dict[str, Any]]:
    return [r for r in lc.records if r["event"] == name]


def names(*states: State) -> list[tuple[str, str]]:
    return [(s.name, f"{s.name.lower()} {x}") for s in states for x in ("a", "b")]


# -- the ledger itself ---------------------------------------------------------------------------------
def test_a_release_probes_only_the_states_it_leaves_newest_first_and_forgets_them() -> None:
    ledger, probed = Ledger(), []

    def probe(name: str, gone: bool) -> Any:
        return lambda: probed.append(name) or gone

    ledger.register(State.DISTRIBUTED, "group", probe("group", False))
    ledger.register(State.MODEL_BUILT, "model", probe("model", False))
    ledger.register(State.MODEL_BUILT, "optimizer", probe("optimizer", True))
    ledger.register(State.CALLBACKS_BOUND, "hooks", probe("hooks", False))
    assert [e.name for e in ledger.survivors(State.DISTRIBUTED, 0.0)] == ["hooks", "model"]
    assert probed == ["hooks", "optimizer", "model"], "the group DISTRIBUTED keeps is not probed"
    assert ledger.names() == [("DISTRIBUTED", "group")]
    assert ledger.survivors(State.DISTRIBUTED, 0.0) == [] and probed == ["hooks", "optimizer", "model"]
    assert [e.name for e in ledger.survivors(State.VALIDATED, 0.0)] == ["group"] and ledger.names() == []


class Cycle:
    """An object that only a reference cycle keeps alive once its owner lets go of it."""

    def __init__(self) -> None:
        self.me = self


def test_what_only_a_reference_cycle_holds_is_gone_not_leaked() -> None:
    import gc
    import weakref

    ledger, held = Ledger(), Cycle()
    ref = weakref.ref(held)
    ledger.register(State.MODEL_BUILT, "model", lambda: ref() is None)
    was = gc.isenabled()
    gc.disable()  # no automatic collection may free it first: the check's own collection must
    try:
        del held
        assert ref() is not None
        assert ledger.survivors(State.VALIDATED, 0.0) == []
    finally:
        if was:
            gc.enable()


def test_the_heap_frozen_at_validated_leaves_out_what_existed_and_is_given_back() -> None:
    import gc

    before = gc.get_freeze_count()
    ledger = Ledger()
    try:
        ledger.freeze_heap()
        if not ledger.froze:
            pytest.skip("the heap is already frozen in this process (an earlier lifecycle's)")
        assert gc.get_freeze_count() > before
        made_after = Cycle()
        ref = __import__("weakref").ref(made_after)
        ledger.register(State.MODEL_BUILT, "model", lambda: ref() is None)
        del made_after
        assert ledger.survivors(State.VALIDATED, 0.0) == []  # what came after the freeze is still collected
    finally:
        ledger.thaw()
    assert not ledger.froze and gc.get_freeze_count() <= before


def test_a_heap_the_program_froze_is_left_as_it_is() -> None:
    import gc

    gc.freeze()  # the program's own (a pre-fork server's), or another lifecycle's
    try:
        frozen = gc.get_freeze_count()
        ledger = Ledger()
        ledger.freeze_heap()
        assert not ledger.froze and gc.get_freeze_count() == frozen
        ledger.thaw()
        assert gc.get_freeze_count() == frozen, "a thaw gave back what the program froze"
    finally:
        gc.unfreeze()


def test_a_probe_that_cannot_look_proves_no_leak() -> None:
    ledger = Ledger()

    def broken() -> bool:
        raise RuntimeError("its module was torn down")

    ledger.register(State.MODEL_BUILT, "model", broken)
    ledger.register(State.MODEL_BUILT, "counted", lambda: 0)  # type: ignore[arg-type,return-value]
    assert [e.name for e in ledger.survivors(State.VALIDATED, 0.0)] == ["counted"]


class FakeTime:
    """A clock that only `sleep` moves; it records each pause."""

    def __init__(self) -> None:
        self.now, self.pauses = 100.0, []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def test_survivors_are_probed_again_for_settle_s_and_those_that_end_meanwhile_are_lingered() -> None:
    fake = FakeTime()
    ledger, probes = Ledger(fake.clock, fake.sleep), {"slow": 0, "stuck": 0, "quick": 0}

    def probe(name: str, gone_at: float) -> Any:
        def gone() -> bool:
            probes[name] += 1
            return fake.now >= gone_at

        return gone

    ledger.register(State.MODEL_BUILT, "stuck", probe("stuck", float("inf")))
    ledger.register(State.MODEL_BUILT, "slow", probe("slow", 100.05))
    ledger.register(State.CALLBACKS_BOUND, "quick", probe("quick", 0.0))
    assert [e.name for e in ledger.survivors(State.DISTRIBUTED, 1.0)] == ["stuck"]
    # 10 ms doubling to 0.25 s, the last pause cut to end exactly at settle_s
    assert fake.pauses == pytest.approx([0.01, 0.02, 0.04, 0.08, 0.16, 0.25, 0.25, 0.19])
    assert fake.now == pytest.approx(101.0)
    [(entry, waited)] = ledger.lingered
    assert entry.name == "slow" and waited == pytest.approx(0.07)  # gone at its fourth probe (after 10 + 20 + 40 ms)
    assert probes == {"quick": 1, "slow": 4, "stuck": 9}, "each survivor probed once per pause, the gone never again"


def test_without_settle_s_nothing_waits_and_a_later_release_forgets_the_lingered() -> None:
    fake = FakeTime()
    ledger = Ledger(fake.clock, fake.sleep)
    ledger.register(State.MODEL_BUILT, "stuck", lambda: False)
    assert [e.name for e in ledger.survivors(State.DISTRIBUTED, 0.0)] == ["stuck"] and fake.pauses == []
    ledger.register(State.MODEL_BUILT, "quick", lambda: True)
    ledger.lingered = [(LedgerEntry(State.MODEL_BUILT, "old", lambda: True), 1.0)]
    assert ledger.survivors(State.DISTRIBUTED, 5.0) == [] and fake.pauses == [] and ledger.lingered == []


def test_entries_are_fixed_values() -> None:
    entry = LedgerEntry(State.MODEL_BUILT, "model", lambda: True)
    with pytest.raises(AttributeError):
        entry.name = "other"  # type: ignore[misc]


# -- through a lifecycle -------------------------------------------------------------------------------
def test_every_forward_state_registers_what_it_made_in_creation_order(make_lc: Any) -> None:
    lc = make_lc(phases=Resourceful())
    lc.advance_to(State.CALLBACKS_BOUND)
    assert lc.ledger == names(*ORDER)
    lc.rebuild()
    assert lc.ledger == names(State.SERVICES_READY, State.DISTRIBUTED)
    lc.advance_to(State.CALLBACKS_BOUND)
    assert lc.ledger == names(*ORDER)
    lc.restart()
    assert lc.ledger == []
    assert events_of(lc, "resource_leaked") == []


def test_phases_without_resources_leave_the_ledger_empty(make_lc: Any) -> None:
    lc = make_lc()
    lc.advance_to(State.CALLBACKS_BOUND)
    assert lc.ledger == []
    lc.shutdown()


def test_a_failure_registers_nothing_and_a_later_release_still_checks_what_was_made(make_lc: Any) -> None:
    phases = Leaky("distributed b")
    lc = make_lc(phases=phases)
    lc.advance_to(State.DISTRIBUTED)
    lc.fail("the test stops here")
    assert lc.ledger == names(State.SERVICES_READY, State.DISTRIBUTED)
    with pytest.raises(ResourceLeak, match=r"distributed b \(DISTRIBUTED\)"):
        lc.restart()


def test_a_resource_that_survives_its_release_is_logged_and_raised_naming_it_and_its_state(make_lc: Any) -> None:
    lc = make_lc(phases=Leaky("callbacks_bound b", "model_built a"))
    lc.advance_to(State.CALLBACKS_BOUND)
    with pytest.raises(ResourceLeak) as caught:
        lc.rebuild()
    leaked = [(r["resource"], r["state"]) for r in events_of(lc, "resource_leaked")]
    assert leaked == [("callbacks_bound b", "CALLBACKS_BOUND"), ("model_built a", "MODEL_BUILT")]
    assert str(caught.value).startswith(
        "2 resource(s) still alive after release to DISTRIBUTED: callbacks_bound b (CALLBACKS_BOUND), "
        "model_built a (MODEL_BUILT); the release of CALLBACKS_BOUND must destroy callbacks_bound b"
    )
    assert (caught.value.resource, caught.value.state) == ("callbacks_bound b", "CALLBACKS_BOUND")


class Settling(Resourceful):
    """Its releases leave `model_built a` alive until its probe has been asked `probes` times (a
    worker process that exits a little after its release), or for good (`probes` None); the ledger
    probes survivors again for `settle_s` (None: the phases say nothing, as the in-process ones)."""

    def __init__(self, settle_s: float | None, probes: int | None) -> None:
        super().__init__("model_built a")
        self.probes, self.asked = probes, 0
        if settle_s is not None:
            self.settle_s = settle_s

    def resources(self, state: State, runtime: Runtime) -> list[tuple[str, Any]]:
        made = super().resources(state, runtime)
        return [(name, self._lingering if name == "model_built a" else gone) for name, gone in made]

    def _lingering(self) -> bool:
        self.asked += 1
        return self.probes is not None and self.asked >= self.probes


def test_a_resource_that_ends_within_the_phases_settle_s_is_lingered_not_leaked(make_lc: Any) -> None:
    phases = Settling(settle_s=30.0, probes=3)
    lc = make_lc(phases=phases)
    lc.advance_to(State.CALLBACKS_BOUND)
    lc.rebuild()
    assert events_of(lc, "resource_leaked") == [] and phases.asked == 3
    [lingered] = events_of(lc, "resource_lingered")
    assert (lingered["resource"], lingered["state"]) == ("model_built a", "MODEL_BUILT")
    assert 0.0 < lingered["lingered_s"] < 30.0  # two pauses: 10 ms and 20 ms, and two collections


def test_a_survivor_of_settle_s_is_a_leak_and_a_shutdown_does_not_wait_for_it(make_lc: Any, tmp_path: Path) -> None:
    lc = make_lc(phases=Settling(settle_s=0.3, probes=None))
    lc.advance_to(State.CALLBACKS_BOUND)
    started = time.monotonic()
    with pytest.raises(ResourceLeak, match=r"model_built a \(MODEL_BUILT\)"):
        lc.restart()
    assert time.monotonic() - started >= 0.3
    lc.shutdown()
    # a shutdown probes once: what its second probe would find gone is logged (600 s would hang)
    phases = Settling(settle_s=600.0, probes=2)
    lc = make_lc(phases=phases, log_dir=tmp_path / "shutdown")
    lc.advance_to(State.CALLBACKS_BOUND)
    lc.shutdown()
    [shutdown] = events_of(lc, "lifecycle_shutdown")  # what is alive: once, in the shutdown's own record
    assert shutdown["leaked"] == [{"resource": "model_built a", "state": "MODEL_BUILT"}]
    assert events_of(lc, "resource_leaked") == events_of(lc, "resource_lingered") == [] and phases.asked == 1
    assert lc.records[-2:] == [shutdown, events_of(lc, "transition_completed")[-1]], "nothing after it but the move"


def test_phases_that_name_no_settle_s_are_probed_once(make_lc: Any) -> None:
    phases = Settling(settle_s=None, probes=2)
    lc = make_lc(phases=phases)
    lc.advance_to(State.CALLBACKS_BOUND)
    with pytest.raises(ResourceLeak, match=r"model_built a \(MODEL_BUILT\)"):
        lc.rebuild()
    assert events_of(lc, "resource_lingered") == [] and phases.asked == 1


# -- restart cycles ------------------------------------------------------------------------------------
def test_a_cycle_numbers_every_later_record_and_logs_its_start_and_end(make_lc: Any) -> None:
    lc = make_lc(phases=Resourceful())
    assert lc.cycle == 0
    lc.begin_cycle(3)
    assert lc.cycle == 3
    lc.advance_to(State.DISTRIBUTED)
    lc.cycle_trained(restart_s=1.5)
    [started] = events_of(lc, "cycle_started")
    assert started["ledger"] == [
        "SERVICES_READY:services_ready a",
        "SERVICES_READY:services_ready b",
        "DISTRIBUTED:distributed a",
        "DISTRIBUTED:distributed b",
    ]
    assert started["fingerprint"] == lc.runtime.fingerprint and started["fingerprint"]
    assert started["restart_s"] == 1.5 and started["cycle"] == 3
    lc.end_cycle(cause_rank=1, cause="peer died")
    [ended] = events_of(lc, "cycle_ended")
    assert (ended["state"], ended["cause_rank"], ended["cause"], ended["cycle"]) == ("DISTRIBUTED", 1, "peer died", 3)


def test_a_provided_store_reaches_the_entry_work_beside_what_the_runtime_holds(make_lc: Any) -> None:
    lc = make_lc()
    lc.advance_to(State.VALIDATED)
    before = lc.runtime
    lc.provide(rendezvous_store="the store")
    assert lc.runtime.rendezvous_store == "the store"
    assert lc.runtime == dataclasses.replace(before, rendezvous_store="the store")
    lc.provide(rendezvous_store=None)
    assert lc.runtime.rendezvous_store is None and lc.runtime.fingerprint == before.fingerprint


def test_a_provided_store_remembers_the_generation_it_was_provided_in(make_lc: Any) -> None:
    lc = make_lc()
    lc.advance_to(State.VALIDATED)
    lc.provide(rendezvous_store="first")
    assert (lc.runtime.generation, lc.runtime.rendezvous_generation) == (0, 0)
    for _ in range(2):
        lc.advance_to(State.SERVICES_READY)
        lc.restart()
    assert (lc.runtime.generation, lc.runtime.rendezvous_generation) == (2, 0)  # kept: the same store
    lc.provide(rendezvous_store="second")
    assert (lc.runtime.generation, lc.runtime.rendezvous_generation) == (2, 2)
