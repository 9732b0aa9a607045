"""The engine through the public `Lifecycle`: side effects declared by entry work, rebuild and restart
(what they release, what they keep, the generation), and a release that fails.

Written to kill the mutants scripts/mutation makes of lifecycle/engine/_side_effects.py and of
restart/rebuild in lifecycle/engine/_driver.py; only public API, so they survive the driver rewrite.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lifecycle import InProcessPhases, InvalidTransition, PhaseContext, PhaseFailed, RunConfig, Runtime, SideEffectError
from lifecycle.errors import SideEffectBeforeValidation
from lifecycle.testing import Entry
from states import STARTUP_ORDER, SideEffect, State, Trigger

CALLBACK_SLOTS = ("finalize_model_grads_func", "grad_scale_func")


def events_of(lc: Any, name: str) -> list[dict[str, Any]]:
    return [r for r in lc.records if r["event"] == name]


class _Declares(InProcessPhases):
    """Entry work that declares one more side effect in one transition."""

    def __init__(self, at: str, kind: SideEffect) -> None:
        super().__init__()
        self.at, self.kind = at, kind
        self.around(State.VALIDATED, enter=self.declaring).around(State.SERVICES_READY, enter=self.declaring)

    def declaring(self, ctx: PhaseContext, enter: Entry) -> Runtime:
        rt = enter(ctx)
        if self.at == ctx.trigger.value:
            ctx.side_effect(self.kind)
        return rt


def test_a_side_effect_declared_by_another_transition_is_refused_naming_its_owner(make_lc) -> None:
    lc = make_lc(phases=_Declares("start_services", SideEffect.RNG))
    lc.validate()
    with pytest.raises(SideEffectError) as info:
        lc.start_services()
    cause = info.value
    assert type(cause) is SideEffectError
    assert str(cause).startswith("refused: rng during start_services(): it belongs to init_distributed()")
    assert (cause.kind, cause.owner, cause.trigger) == (
        SideEffect.RNG,
        Trigger.INIT_DISTRIBUTED,
        Trigger.START_SERVICES,
    )
    [refused] = events_of(lc, "side_effect_refused")
    assert (refused["kind"], refused["trigger"], refused["owner"], refused["state"]) == (
        "rng",
        "start_services",
        "init_distributed",
        "VALIDATED",
    )
    assert lc.state is State.FAILED


def test_a_side_effect_declared_before_validation_says_to_validate_first(make_lc) -> None:
    lc = make_lc(phases=_Declares("validate", SideEffect.FILES))
    with pytest.raises(SideEffectBeforeValidation) as info:
        lc.validate()
    cause = info.value
    assert "files before VALIDATED: call validate() first; it belongs to start_services()" in str(cause)
    [refused] = events_of(lc, "side_effect_refused")
    assert refused["trigger"] == "validate" and refused["state"] == "CONFIGURED"


def test_side_effects_declared_by_their_owner_are_logged_with_it(make_lc) -> None:
    lc = make_lc()
    lc.advance_to(State.CALLBACKS_BOUND)
    declared = [(r["kind"], r["trigger"]) for r in events_of(lc, "side_effect")]
    assert declared == [
        ("tokenizer", "start_services"),
        ("process_group", "init_distributed"),
        ("parallel_state", "init_distributed"),
        ("rng", "init_distributed"),
        ("model", "build_model"),
        ("callbacks", "bind_callbacks"),
    ]
    assert events_of(lc, "side_effect_refused") == []


def test_rebuild_clears_the_old_configs_callback_slots_and_binds_the_new_model(make_lc) -> None:
    lc = make_lc()
    lc.advance_to(State.CALLBACKS_BOUND)
    old_config = lc.runtime.transformer_config
    assert all(getattr(old_config, slot) is not None for slot in CALLBACK_SLOTS)
    lc.rebuild()
    assert all(getattr(old_config, slot) is None for slot in CALLBACK_SLOTS)
    assert lc.runtime.model is None and lc.runtime.binding is None
    lc.advance_to(State.CALLBACKS_BOUND)
    new_config = lc.runtime.transformer_config
    assert new_config is not old_config
    assert all(getattr(new_config, slot) is not None for slot in CALLBACK_SLOTS)
    assert lc.runtime.generation == 0


def test_restart_releases_everything_but_the_validated_config_and_starts_a_new_generation(make_lc) -> None:
    lc = make_lc()
    lc.advance_to(State.CALLBACKS_BOUND)
    fingerprint = lc.runtime.fingerprint
    lc.restart()
    rt = lc.runtime
    assert lc.state is State.VALIDATED and rt.generation == 1
    assert not rt.services_ready and not rt.distributed and rt.model is None and rt.binding is None
    assert rt.fingerprint == fingerprint
    [started] = events_of(lc, "generation_started")
    assert started["reason"] == "restart" and started["generation"] == 1
    assert lc.records[-1]["generation"] == 1
    lc.advance_to(State.CALLBACKS_BOUND)
    lc.restart()
    assert lc.runtime.generation == 2


def test_a_failed_startup_restarts_into_the_next_generation(make_lc) -> None:
    phases = InProcessPhases(fail_on="build_model")
    lc = make_lc(phases=phases)
    with pytest.raises(PhaseFailed):
        lc.advance_to(State.MODEL_BUILT)
    assert lc.state is State.FAILED
    phases.fail_on = None
    lc.restart()
    lc.advance_to(State.MODEL_BUILT)
    assert lc.runtime.generation == 1 and lc.runtime.model is not None


class _ReleaseFails(InProcessPhases):
    """The first release of the model raises (a process group that cannot be destroyed); later ones work."""

    failed = False

    def __init__(self) -> None:
        super().__init__()
        self.around(State.MODEL_BUILT, release=self.release_once)

    def release_once(self, ctx: PhaseContext, release: Entry) -> Runtime:
        if not self.failed:
            self.failed = True
            raise RuntimeError("cannot destroy process group")
        return release(ctx)


def test_a_failing_release_at_shutdown_still_shuts_down_drops_the_model_and_reports_it(make_lc) -> None:
    lc = make_lc(phases=_ReleaseFails())
    lc.advance_to(State.MODEL_BUILT)
    with pytest.raises(PhaseFailed, match="shutdown released what it could, but: cannot destroy process group"):
        lc.shutdown()
    assert lc.state is State.SHUT_DOWN
    assert lc.runtime.model is None and lc.runtime.optimizer is None
    [failed] = events_of(lc, "transition_failed")
    assert failed["trigger"] == "shutdown" and failed["error_type"] == "RuntimeError"
    assert events_of(lc, "lifecycle_shutdown")


class _ReleaseLeaksASecret(InProcessPhases):
    def __init__(self) -> None:
        super().__init__()
        self.around(State.MODEL_BUILT, release=self.release)

    def release(self, ctx: PhaseContext, release: Entry) -> Runtime:
        release(ctx)
        raise RuntimeError("cannot reach https://alice:PASS1111@host/ck with hf_abcdefghijklmnopqrstuvwxyz0123")


def test_a_failing_release_at_shutdown_is_logged_redacted(make_lc) -> None:
    lc = make_lc(phases=_ReleaseLeaksASecret())
    lc.advance_to(State.MODEL_BUILT)
    with pytest.raises(PhaseFailed):
        lc.shutdown()
    [failed] = events_of(lc, "transition_failed")
    assert "PASS1111" not in failed["error"] and "hf_abcdefghij" not in failed["error"], failed["error"]
    assert "cannot reach" in failed["error"]


@pytest.mark.parametrize("trigger", ["rebuild", "restart"])
def test_a_failing_release_at_rebuild_or_restart_fails_the_lifecycle(make_lc, trigger: str) -> None:
    lc = make_lc(phases=_ReleaseFails())
    lc.advance_to(State.MODEL_BUILT)
    with pytest.raises(PhaseFailed, match="cannot destroy process group"):
        lc.fire(trigger)
    assert lc.state is State.FAILED
    # A restart begun is counted, released or not: every rank of a job restarts as many times, and
    # the generation names their rendezvous keys (test_restart.py: a rank that did not count it waited
    # under other keys than its peers until the deadline). A rebuild keeps the generation.
    assert lc.runtime.generation == (1 if trigger == "restart" else 0)
    assert [r["generation"] for r in events_of(lc, "generation_started")] == ([1] if trigger == "restart" else [])
    lc.restart()  # the release left nothing half-done that a second one trips on
    assert (lc.state, lc.runtime.generation) == (State.VALIDATED, 2 if trigger == "restart" else 1)


def test_a_config_mutated_after_validation_still_lets_the_lifecycle_fail_and_shut_down(make_lc) -> None:
    config = RunConfig()
    lc = make_lc(config=config)
    lc.advance_to(State.SERVICES_READY)
    object.__setattr__(config.training, "seed", 99)
    lc.fail("operator stopped the job")
    assert lc.state is State.FAILED
    lc.shutdown()
    assert lc.state is State.SHUT_DOWN
    assert events_of(lc, "config_mutated") == []


def test_an_undefined_trigger_is_logged_and_leaves_the_state_alone(make_lc) -> None:
    lc = make_lc()
    lc.validate()
    with pytest.raises(InvalidTransition, match="rebuild is not defined from VALIDATED; allowed from there: "):
        lc.rebuild()
    assert lc.state is State.VALIDATED
    [refused] = events_of(lc, "invalid_transition")
    assert refused["trigger"] == "rebuild" and refused["source"] == "VALIDATED"
    assert refused["allowed"] == ["start_services", "fail", "shutdown"]


def test_each_transition_records_how_long_it_took_within_the_time_that_passed(make_lc) -> None:
    import time

    lc = make_lc()
    started = time.perf_counter()
    lc.advance_to(State.CALLBACKS_BOUND)
    elapsed = time.perf_counter() - started
    done = events_of(lc, "transition_completed")
    assert [r["dest"] for r in done] == [s.name for s in STARTUP_ORDER[1:]], "one record per forward transition"
    assert all(0 <= r["duration_s"] <= elapsed for r in done)


def test_a_failed_transition_records_how_long_it_ran_within_the_time_that_passed(make_lc) -> None:
    import time

    lc = make_lc(phases=InProcessPhases(fail_on="init_distributed"))
    lc.advance_to(State.SERVICES_READY)
    started = time.perf_counter()
    with pytest.raises(PhaseFailed):
        lc.init_distributed()
    elapsed = time.perf_counter() - started
    [failed] = events_of(lc, "transition_failed")
    assert 0 <= failed["duration_s"] <= elapsed


def test_a_release_that_fails_at_shutdown_is_recorded_with_no_duration(make_lc) -> None:
    lc = make_lc(phases=_ReleaseFails())
    lc.advance_to(State.MODEL_BUILT)
    with pytest.raises(PhaseFailed):
        lc.shutdown()
    [failed] = events_of(lc, "transition_failed")
    assert failed["duration_s"] == 0.0


def test_the_signal_handlers_stay_while_training_go_at_shutdown_and_only_failed_records_a_reason(
    make_lc, tmp_path: Path
) -> None:
    """After the target state a signal is the training loop's (docs/failures.md): the lifecycle's
    SIGTERM handler only logs it and hands it on, and shutdown gives the user's back. A failed
    transition's record says why (`reason`); no other one has it."""
    import signal

    before = signal.getsignal(signal.SIGTERM)
    lc = make_lc()
    lc.advance_to(State.CALLBACKS_BOUND)
    assert signal.getsignal(signal.SIGTERM) is not before, "the lifecycle's, to log a signal while training"
    lc.shutdown()
    assert signal.getsignal(signal.SIGTERM) is before
    assert all("reason" not in r for r in events_of(lc, "transition_completed"))

    def fails(ctx: PhaseContext, enter: Entry) -> Runtime:
        raise RuntimeError("the provider broke")

    failing = make_lc(phases=InProcessPhases().around(State.MODEL_BUILT, enter=fails), log_dir=tmp_path / "failing")
    with pytest.raises(PhaseFailed):
        failing.advance_to(State.CALLBACKS_BOUND)
    done = events_of(failing, "transition_completed")
    assert [r["dest"] for r in done if "reason" in r] == ["FAILED"]
    assert done[-1]["reason"] == "build_model: RuntimeError"  # where and what (the message may hold a secret)
