"""A state is one phase object: each registry has one for every startup state after CONFIGURED, a
phase is registered only for such a state, and a state with no phase fails its transition with a
message saying how to register one."""

from __future__ import annotations

from typing import Any

import pytest

from lifecycle import ConfigError, InProcessPhases, PhaseFailed, Phases, Work
from lifecycle.core_entry import PHASES, MegatronPhases
from states import STARTUP_ORDER, State


@pytest.mark.parametrize("registry", [InProcessPhases, MegatronPhases])
def test_each_registry_has_one_phase_for_every_startup_state_after_configured(registry: Any) -> None:
    phases = registry()
    for state in STARTUP_ORDER[1:]:
        phase = phases.phase_for(state)
        assert callable(getattr(phase, "enter", None)) and callable(getattr(phase, "release", None)), state
    assert phases.phase_for(State.CONFIGURED) is None


@pytest.mark.parametrize("state", [State.CONFIGURED, State.FAILED, State.SHUT_DOWN])
def test_a_phase_is_registered_only_for_a_startup_state_after_configured(state: State) -> None:
    with pytest.raises(ConfigError, match=f"not {state.name}; use one of VALIDATED, SERVICES_READY") as info:
        Phases().register(state, Work(lambda ctx: ctx.runtime))
    assert info.value.field == "state"


def test_wrapping_a_state_with_no_phase_says_to_register_one_first() -> None:
    with pytest.raises(ConfigError, match="no phase is registered for DISTRIBUTED to wrap"):
        Phases().around(State.DISTRIBUTED, enter=lambda ctx, enter: enter(ctx))


def test_entering_a_state_with_no_phase_fails_the_transition_saying_how_to_register_one(make_lc: Any) -> None:
    phases = Phases({State.VALIDATED: Work(lambda ctx: ctx.runtime)})
    lc = make_lc(phases=phases)
    lc.validate()
    with pytest.raises(
        PhaseFailed,
        match=r"Phases has no phase for SERVICES_READY; register one: "
        r"phases\.register\(State\.SERVICES_READY, phase\)",
    ):
        lc.start_services()
    assert lc.state is State.FAILED


def test_a_wrapped_phase_runs_around_the_registered_one_and_releases_through_it(make_lc: Any) -> None:
    seen: list[str] = []

    def enter(ctx: Any, inner: Any) -> Any:
        seen.append(f"before {ctx.trigger.value}")
        return inner(ctx)

    def release(ctx: Any, inner: Any) -> Any:
        seen.append("release")
        return inner(ctx)

    lc = make_lc(phases=InProcessPhases().around(State.DISTRIBUTED, enter=enter, release=release))
    lc.advance_to(State.DISTRIBUTED)
    assert lc.runtime.distributed and seen == ["before init_distributed"]
    lc.restart()
    assert not lc.runtime.distributed and seen == ["before init_distributed", "release"]


def test_the_real_phases_give_their_survivors_time_to_end_and_the_in_process_ones_none() -> None:
    """Megatron's resources end in other threads and processes (a worker exiting, a gloo work
    unwinding after an abort): the ledger probes them again for `settle_s` before a leak."""
    from lifecycle.core_entry.resources import SETTLE_S
    from lifecycle.lm_dropin.entry import MegatronLMPhases

    assert MegatronPhases.settle_s == SETTLE_S == 5.0
    assert MegatronLMPhases.settle_s == SETTLE_S
    assert getattr(InProcessPhases(), "settle_s", 0.0) == 0.0


def test_the_real_phases_cannot_be_rewritten_and_a_wrap_changes_only_the_registry_it_is_made_on() -> None:
    real = PHASES[State.CALLBACKS_BOUND]
    with pytest.raises(TypeError):
        PHASES[State.CALLBACKS_BOUND] = real  # type: ignore[index]  # the point: it is read-only
    wrapped = MegatronPhases().around(State.CALLBACKS_BOUND, release=lambda ctx, release: release(ctx))
    assert wrapped.phase_for(State.CALLBACKS_BOUND) is not real
    assert MegatronPhases().phase_for(State.CALLBACKS_BOUND) is real
