"""Each rule: a log that violates it and one that does not. Logs come from the real engine where it
can produce them; hand-written (through the real AuditLog) only where the engine refuses."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from audit_logs import (
    FP,
    OldModelPhases,
    ProviderTargetPhases,
    audit_rules,
    clean_events,
    clean_run,
    engine_rank,
    index,
    train_and_shut_down,
    write_events,
)

from lifecycle import ConfigMutated, InProcessPhases, PhaseFailed
from lifecycle.audit import audit
from lifecycle.log import records
from states import State


@pytest.fixture(scope="module")
def clean_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return clean_run(tmp_path_factory.mktemp("clean"), world=3)


def test_a_clean_engine_run_passes_every_rule(clean_dir: Path) -> None:
    result = audit([str(clean_dir)], jobs=1)
    assert (result.findings, result.errors, result.exit_code) == ((), (), 0)
    assert len(result.ranks) == 3


def test_rebuild_and_restart_with_rebinding_pass_even_when_object_ids_are_reused(tmp_path: Path) -> None:
    lc = engine_rank(tmp_path)
    lc.advance_to(State.CALLBACKS_BOUND)
    lc.rebuild()
    lc.advance_to(State.CALLBACKS_BOUND)
    lc.restart()
    train_and_shut_down(lc)
    assert audit_rules(tmp_path) == set()


def test_the_hand_written_clean_startup_passes(tmp_path: Path) -> None:
    write_events(tmp_path, clean_events())
    assert audit_rules(tmp_path) == set()


# LA001 — the engine refuses side effects before VALIDATED (it logs side_effect_refused instead).
def test_a_side_effect_before_validated_is_reported(tmp_path: Path) -> None:
    ev = clean_events()
    ev.insert(1, ("side_effect", dict(kind="rng", trigger="init_distributed")))
    write_events(tmp_path, ev)
    result = audit([str(tmp_path)], jobs=1)
    [finding] = result.findings
    assert finding.rule == "LA001" and "'rng'" in finding.message and "CONFIGURED" in finding.message
    assert finding.line == 2 and result.exit_code == 1


# LA002 — the engine's model_is_built guard refuses binding before MODEL_BUILT.
def test_callbacks_bound_before_any_model_was_built_are_reported(tmp_path: Path) -> None:
    ev = clean_events()
    del ev[index(ev, "model_built")]
    write_events(tmp_path, ev)
    assert "LA002" in audit_rules(tmp_path)


def test_binding_in_a_new_generation_needs_a_model_built_in_that_generation(tmp_path: Path) -> None:
    ev = clean_events()[:-4]  # bound, no step or shutdown yet
    ev += [
        ("transition_started", dict(trigger="restart", source="CALLBACKS_BOUND")),
        ("__generation__", dict(generation=1)),
        ("generation_started", dict(reason="restart")),
        (
            "transition_completed",
            dict(trigger="restart", source="CALLBACKS_BOUND", dest="VALIDATED", duration_s=0.01, config_fingerprint=FP),
        ),
    ]
    bind = index(ev, "callbacks_bound")
    ev.append(ev[bind])  # bound again in generation 1 with no model_built there
    write_events(tmp_path, ev)
    assert "LA002" in audit_rules(tmp_path)


# LA003 — a buggy binding, driven through the engine.
def test_callbacks_bound_to_the_providers_config_instead_of_the_schedulers_are_reported(tmp_path: Path) -> None:
    train_and_shut_down(engine_rank(tmp_path, phases=ProviderTargetPhases()))
    result = audit([str(tmp_path)], jobs=1)
    assert {f.rule for f in result.findings} == {"LA003"}
    assert "the scheduler will not call them" in result.findings[0].message


# LA004
def test_training_after_a_rebuild_without_rebinding_is_reported(tmp_path: Path) -> None:
    lc = engine_rank(tmp_path)
    lc.advance_to(State.CALLBACKS_BOUND)
    lc.rebuild()
    lc.advance_to(State.MODEL_BUILT)
    lc.record(records.StepCompleted(step=1, loss=1.0, duration_s=0.01))
    lc.shutdown()
    result = audit([str(tmp_path)], jobs=1)
    assert "LA004" in {f.rule for f in result.findings}
    assert "without rebinding" in next(f for f in result.findings if f.rule == "LA004").message


def test_rebinding_to_the_old_model_after_a_rebuild_is_reported(tmp_path: Path) -> None:
    phases = OldModelPhases()
    lc = engine_rank(tmp_path, phases=phases)
    lc.advance_to(State.CALLBACKS_BOUND)
    lc.rebuild()
    train_and_shut_down(lc)
    found = audit([str(tmp_path)], jobs=1).findings
    la004 = [f for f in found if f.rule == "LA004"]
    assert la004 and "old model" in la004[0].message


# LA005
def test_a_config_mutated_after_validated_is_reported(tmp_path: Path) -> None:
    config_lc = engine_rank(tmp_path)
    config_lc.validate()
    object.__setattr__(config_lc.runtime.config.model, "num_layers", 8)
    with pytest.raises(ConfigMutated):
        config_lc.start_services()
    config_lc.shutdown()
    assert "LA005" in audit_rules(tmp_path)


def test_a_transition_completing_with_another_fingerprint_is_reported(tmp_path: Path) -> None:
    ev = clean_events()
    i = index(ev, "transition_completed", trigger="build_model")
    ev[i] = (ev[i][0], {**ev[i][1], "config_fingerprint": "e" * 64})
    write_events(tmp_path, ev)
    assert audit_rules(tmp_path) == {"LA005"}


# LA006 / LA007 / LA008 — cross-rank
def test_ranks_that_validated_different_configs_are_reported(tmp_path: Path) -> None:
    train_and_shut_down(engine_rank(tmp_path, 0, 2, seed=1))
    train_and_shut_down(engine_rank(tmp_path, 1, 2, seed=2))
    result = audit([str(tmp_path)], jobs=1)
    assert {f.rule for f in result.findings} == {"LA006"}


def test_ranks_ending_in_different_states_are_reported(tmp_path: Path) -> None:
    engine_rank(tmp_path, 0, 2).advance_to(State.CALLBACKS_BOUND)
    failing = engine_rank(tmp_path, 1, 2, phases=InProcessPhases(fail_on="build_model"))
    with pytest.raises(PhaseFailed):
        failing.advance_to(State.CALLBACKS_BOUND)
    found = audit_rules(tmp_path)
    assert {"LA007", "LA013"} <= found and "LA010" not in found


def test_ranks_taking_different_transition_paths_are_reported(tmp_path: Path) -> None:
    train_and_shut_down(engine_rank(tmp_path, 0, 2))
    lc = engine_rank(tmp_path, 1, 2)
    lc.advance_to(State.CALLBACKS_BOUND)
    lc.rebuild()
    train_and_shut_down(lc)
    assert audit_rules(tmp_path) == {"LA008"}


# LA009 — the engine never writes a broken chain: edit its log.
@pytest.mark.parametrize("damage", ["edit", "remove", "swap", "drop_head", "strip_hash"])
def test_a_damaged_hash_chain_is_reported(clean_dir: Path, tmp_path: Path, damage: str) -> None:
    path = tmp_path / "rank-00000.jsonl"
    shutil.copy(clean_dir / "rank-00000.jsonl", path)
    lines = path.read_bytes().splitlines(keepends=True)
    if damage == "edit":
        lines[4] = lines[4].replace(b'"source":"', b'"source":"X', 1)
    elif damage == "remove":
        del lines[7]
    elif damage == "swap":
        lines[3], lines[4] = lines[4], lines[3]
    elif damage == "drop_head":
        del lines[0]
    else:
        lines[2] = lines[2].split(b',"hash":')[0] + b"}\n"
    path.write_bytes(b"".join(lines))
    result = audit([str(path)], jobs=1)
    assert "LA009" in {f.rule for f in result.findings} or result.errors


# LA010
def test_a_lifecycle_abandoned_mid_startup_is_reported_with_its_state(tmp_path: Path) -> None:
    engine_rank(tmp_path).advance_to(State.DISTRIBUTED)
    result = audit([str(tmp_path)], jobs=1)
    [finding] = [f for f in result.findings if f.rule != "LA018"]
    assert finding.rule == "LA010" and "state DISTRIBUTED" in finding.message
    assert "target CALLBACKS_BOUND" in finding.message


def test_a_lifecycle_that_stops_at_its_plans_target_did_not_die(tmp_path: Path) -> None:
    engine_rank(tmp_path, plan="inference").advance_to(State.MODEL_BUILT)
    assert "LA010" not in audit_rules(tmp_path)


# LA021
def test_a_log_that_ends_at_its_target_without_a_shutdown_is_incomplete_not_clean(tmp_path: Path) -> None:
    engine_rank(tmp_path / "open", plan="inference").advance_to(State.MODEL_BUILT)
    result = audit([str(tmp_path / "open")], jobs=1)
    [finding] = result.findings
    assert finding.rule == "LA021" and "state MODEL_BUILT with no shutdown or failure record" in finding.message
    with engine_rank(tmp_path / "shut", plan="inference") as lc:
        lc.advance_to(State.MODEL_BUILT)
    assert audit_rules(tmp_path / "shut") == set()


# LA011
def test_a_first_step_without_exactly_one_finalizer_call_is_reported(tmp_path: Path) -> None:
    train_and_shut_down(engine_rank(tmp_path), finalizer_calls=0)
    assert audit_rules(tmp_path) == {"LA011"}


# LA013
def test_a_failed_transition_is_reported_even_after_shutdown(tmp_path: Path) -> None:
    with pytest.raises(PhaseFailed), engine_rank(tmp_path, phases=InProcessPhases(fail_on="build_model")) as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
    result = audit([str(tmp_path)], jobs=1)
    assert {f.rule for f in result.findings} == {"LA013", "LA018"}
    [failed] = [f for f in result.findings if f.rule == "LA013"]
    assert "'build_model' failed" in failed.message
    assert failed.line == 16  # the transition_failed record, not the shutdown after it


def test_a_lifecycle_failed_on_purpose_and_shut_down_is_reported(tmp_path: Path) -> None:
    lc = engine_rank(tmp_path)
    lc.advance_to(State.SERVICES_READY)
    lc.fail("operator gave up")
    lc.shutdown()
    result = audit([str(tmp_path)], jobs=1)
    assert {f.rule for f in result.findings} == {"LA013", "LA018"}
    assert "from state SERVICES_READY: operator gave up" in result.findings[0].message


def test_a_failure_recovered_by_restart_is_not_reported(tmp_path: Path) -> None:
    phases = InProcessPhases(fail_on="build_model")
    lc = engine_rank(tmp_path, phases=phases)
    with pytest.raises(PhaseFailed):
        lc.advance_to(State.CALLBACKS_BOUND)
    phases.fail_on = None  # the transient fault is gone
    lc.restart()
    train_and_shut_down(lc)
    assert audit_rules(tmp_path) == set()


# LA014 / LA015 / LA016
def test_missing_ranks_are_reported_by_range(tmp_path: Path) -> None:
    for rank in (0, 1, 4):
        train_and_shut_down(engine_rank(tmp_path, rank, 6))
    result = audit([str(tmp_path)], jobs=1)
    [finding] = result.findings
    assert finding.rule == "LA014" and "2-3,5 (3 ranks)" in finding.message


def test_the_same_rank_given_twice_is_reported(clean_dir: Path, tmp_path: Path) -> None:
    shutil.copy(clean_dir / "rank-00001.jsonl", tmp_path / "rank-00001.jsonl")
    assert audit_rules(clean_dir, tmp_path) == {"LA015"}


def test_logs_of_two_runs_are_reported(tmp_path: Path) -> None:
    train_and_shut_down(engine_rank(tmp_path, 0, 2, run_id="run-a"))
    train_and_shut_down(engine_rank(tmp_path, 1, 2, run_id="run-b", existing="append"))
    assert "LA016" in audit_rules(tmp_path)


def test_every_rule_has_a_test_that_triggers_it() -> None:
    from lifecycle.audit import RULES

    source = "".join(p.read_text() for p in Path(__file__).parent.glob("test_audit_*.py"))
    source += (Path(__file__).parents[2] / "integration" / "test_tripwires.py").read_text()  # LA012
    named = {r.id: (f'"{r.id}"', f"RuleId.{r.slug.upper().replace('-', '_')}") for r in RULES}
    missing = [rule for rule, spellings in named.items() if not any(s in source for s in spellings)]
    assert missing == [], f"no tests/unit/audit/test_audit_*.py names these rules (as RuleId.X or the id): {missing}"


@pytest.mark.slow
def test_a_rank_process_killed_mid_build_is_reported_as_died_in_that_transition(tmp_path: Path) -> None:
    from audit_logs import launched_rank

    from lifecycle.launchers.local import RankFailed, run_ranks

    with pytest.raises(RankFailed) as info:
        run_ranks(launched_rank, 3, str(tmp_path), 2, timeout_s=120)
    assert info.value.rank == 2
    result = audit([str(tmp_path)], jobs=1)
    died = [f for f in result.findings if f.rule == "LA010"]
    assert [(f.rank, f.source) for f in died] == [(2, str(tmp_path / "rank-00002.jsonl"))]
    assert "state DISTRIBUTED during 'build_model'" in died[0].message
    assert {f.rule for f in result.findings} == {"LA007", "LA008", "LA010", "LA018"}
    assert {f.rank for f in result.findings if f.rank is not None} == {2}
    [cause] = result.root_causes
    assert (cause.rank, cause.kind, cause.victims) == (2, "died", ())


def test_without_a_target_field_the_plan_decides_where_a_rank_should_have_stopped(tmp_path: Path) -> None:
    ev = clean_events()
    ev[0] = ("lifecycle_started", {k: v for k, v in ev[0][1].items() if k != "target"} | {"plan": "inference"})
    stop = index(ev, "transition_completed", trigger="build_model")
    write_events(tmp_path / "inference", ev[: stop + 1])
    assert audit_rules(tmp_path / "inference") == {"LA021"}  # at its target, not dead; not shut down either
    ev[0] = ("lifecycle_started", ev[0][1] | {"plan": "training"})
    write_events(tmp_path / "training", ev[: stop + 1])
    assert audit_rules(tmp_path / "training") == {"LA010", "LA018"}
