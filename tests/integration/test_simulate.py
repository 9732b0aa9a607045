"""`lifecycle simulate` on real megatron-core: ranks of a 4,096-rank job on the fake backend, checked
against megatron's RankGenerator; refusals before any rank runs; the audit of its logs; and the
simulate-then-audit session of docs/simulate.md, run as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lifecycle import ConfigError, RunConfig
from lifecycle.config import validate
from lifecycle.launchers.local import run_ranks

ROOT = Path(__file__).resolve().parents[2]
BIN = str(Path(sys.executable).parent)


def lifecycle(*args: str, cwd: Path = ROOT, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lifecycle", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env={"PYTHONPATH": str(ROOT), "PATH": f"{BIN}:/usr/bin:/bin"},
    )


# -- fast: nothing here imports torch ----------------------------------------------------------------


def test_the_gpt_4096_preset_is_a_valid_moe_layout_for_4096_ranks() -> None:
    config = RunConfig.preset("gpt-4096")
    assert validate(config, environment=False) == []
    p = config.parallel
    assert (p.world_size, p.tp, p.pp, p.cp, p.ep, config.model.num_moe_experts) == (4096, 8, 4, 2, 8, 64)


def test_importing_the_simulation_modules_pulls_in_neither_torch_nor_megatron() -> None:
    code = (
        "import sys, lifecycle.simulate, lifecycle.cli.simulate;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'megatron')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


@pytest.mark.release_independent  # the lifecycle's own config check and CLI line: refused before any rank is simulated
def test_an_expert_count_the_expert_parallel_size_does_not_divide_is_refused_before_any_rank(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    run = lifecycle(
        "simulate", "--preset", "gpt-4096", "--set", "model.num_moe_experts=60", "--all", "--log-dir", str(logs)
    )
    assert run.returncode == 1, run.stderr
    assert "model.num_moe_experts=60: not divisible by parallel.ep=8" in run.stderr
    assert run.stderr.count("num_moe_experts=60") == 1 and "Traceback" not in run.stderr
    assert "no rank was simulated" in run.stderr and run.stdout == ""
    assert not logs.exists()


@pytest.mark.release_independent  # the CLI's argument checks: exit 2, no rank simulated
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--ranks", "0,5000"], "--ranks 0,5000: '5000' is outside [0, 4096)"),
        (["--ranks", "zero"], "--ranks zero: 'zero' is not a rank or a range like 0-7"),
        (["--sample", "0"], "--sample 0: must be at least 1"),
        (["--jobs", "0"], "--jobs 0: must be at least 1"),
        (["--set", "parallel.world_size=null"], "--world-size: the config sets no parallel.world_size"),
        (["--set", "parallel.tpp=2"], "did you mean 'parallel.tp'"),
    ],
)
def test_a_wrong_flag_exits_2_with_one_line_naming_it(flags: list[str], message: str) -> None:
    run = lifecycle("simulate", "--preset", "gpt-4096", *flags)
    assert run.returncode == 2, run.stderr
    assert message in run.stderr and "Traceback" not in run.stderr


@pytest.mark.release_independent  # the CLI's log-dir check: refused before any rank runs
def test_a_log_dir_holding_another_runs_logs_is_refused(tmp_path: Path) -> None:
    (tmp_path / "rank-00000.jsonl").write_text("")
    run = lifecycle("simulate", "--preset", "gpt-4096", "--ranks", "0", "--log-dir", str(tmp_path))
    assert run.returncode == 2 and "already holds rank logs" in run.stderr


# -- megatron-core in a spawned process --------------------------------------------------------------


def _expected_groups(rank: int, world: int, tp: int, pp: int, cp: int, ep: int) -> dict[str, list[int]]:
    """Straight from megatron's RankGenerator (the order initialize_model_parallel defaults to)."""
    from megatron.core.parallel_state import RankGenerator

    order = "tp-cp-ep-dp-pp"
    dense = RankGenerator(tp=tp, ep=1, dp=world // (tp * pp * cp), pp=pp, cp=cp, order=order)
    expert = RankGenerator(tp=tp, ep=ep, dp=world // (tp * ep * pp), pp=pp, cp=1, order=order)
    out = {}
    for name, gen, token in (
        ("tp", dense, "tp"),
        ("pp", dense, "pp"),
        ("cp", dense, "cp"),
        ("dp", dense, "dp"),
        ("ep", expert, "ep"),
    ):
        [out[name]] = [g for g in gen.get_ranks(token) if rank in g]
    return out


def _library_checks(log_root: str) -> dict[str, Any]:
    import warnings

    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    from lifecycle.simulate import Layout, Simulation, prepare, sample_ranks, simulate
    from states import State

    warnings.filterwarnings("ignore")
    out: dict[str, Any] = {}
    config = prepare(RunConfig.preset("gpt-4096"))
    layout = Layout(config.parallel, 4096)
    ranks = sample_ranks(layout, 16, seed=0)
    result = simulate(
        Simulation(config=config, ranks=tuple(ranks), log_dir=f"{log_root}/sample", selection="sample 16"), layout
    )
    out["sample"] = [(r.rank, r.state, r.ok, r.error, r.observed and r.observed.to_dict()) for r in result.reports]
    out["independent"] = {r: _expected_groups(r, 4096, 8, 4, 2, 8) for r in ranks}
    out["important"] = layout.important_ranks()
    wrong = Layout(RunConfig.preset("gpt-4096", ["parallel.tp=4", "parallel.cp=4"]).parallel, 4096)  # not built
    out["wrong"] = [r.mismatches for r in simulate(Simulation(config=config, ranks=(0, 4095)), wrong).reports]
    pooled = simulate(Simulation(config=config, ranks=tuple(ranks[:6])), layout, jobs=2)
    out["pooled"] = [(r.rank, r.ok, r.observed and r.observed.to_dict()) for r in pooled.reports]
    out["released"] = (dist.is_initialized(), ps.model_parallel_is_initialized())
    dense = prepare(RunConfig.preset("gpt-4096", ["parallel.cp=1"]), until=State.MODEL_BUILT)
    built = simulate(
        Simulation(config=dense, ranks=(0, 1024, 4095), until=State.MODEL_BUILT, log_dir=f"{log_root}/model"),
        Layout(dense.parallel, 4096),
    )
    out["model"] = [(r.rank, r.state, r.ok, r.error, r.parameters) for r in built.reports]
    out["shrunk"] = (dense.model.num_layers, dense.model.hidden_size, dense.plan, dense.model.transformer_impl)
    for until, overrides in ((State.MODEL_BUILT, []), (State.DISTRIBUTED, ["model.num_moe_experts=60"])):
        try:
            prepare(RunConfig.preset("gpt-4096", overrides), until=until)
        except ConfigError as exc:
            out.setdefault("refused", []).append(exc.field)
    for sim in (Simulation(config=RunConfig.preset("gpt-4096"), ranks=(0,)), Simulation(config=config, ranks=(4096,))):
        try:
            simulate(sim, layout)
        except ConfigError as exc:
            out.setdefault("unsimulatable", []).append(str(exc))
    return out


@pytest.fixture(scope="module")
def checks(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    root = tmp_path_factory.mktemp("simulate")
    return run_ranks(_library_checks, 1, str(root), timeout_s=600)[0], root


@pytest.mark.slow
def test_sampled_ranks_of_a_4096_rank_job_agree_with_rank_generator(checks: tuple[dict[str, Any], Path]) -> None:
    out, _ = checks
    assert len(out["sample"]) == 16
    for rank, state, ok, error, placement in out["sample"]:
        assert (state, ok, error) == ("DISTRIBUTED", True, None), rank
        expected = out["independent"][rank]
        assert {name: placement[f"{name}_group"] for name in expected} == expected, rank
        assert placement["first_stage"] == (rank < 1024) and placement["last_stage"] == (rank >= 3072)
        pp_group = expected["pp"]
        in_embedding = rank in (pp_group[0], pp_group[-1])
        assert placement["embedding_group"] == ([pp_group[0], pp_group[-1]] if in_embedding else [])


@pytest.mark.slow
def test_a_sample_starts_with_the_ranks_a_topology_mistake_shows_on(checks: tuple[dict[str, Any], Path]) -> None:
    out, _ = checks
    important = [0, 4095, 1023, 1024, 2047, 2048, 3071, 3072, 56, 1080, 2104, 3128]
    assert out["important"] == important  # first/last rank, each stage's ends, each stage's first EP group's ends
    assert set(important) <= {rank for rank, *_ in out["sample"]}


@pytest.mark.slow
def test_a_placement_that_rank_generator_does_not_give_is_reported_field_by_field(
    checks: tuple[dict[str, Any], Path],
) -> None:
    first, last = checks[0]["wrong"]
    assert "cp_group: megatron (0, 8), RankGenerator (0, 4, 8, 12)" in first
    assert any(m.startswith("tp_group: megatron (4088, 4089") for m in last)


@pytest.mark.slow
def test_a_pool_of_processes_places_ranks_as_one_process_does(checks: tuple[dict[str, Any], Path]) -> None:
    out, _ = checks
    one = {rank: placement for rank, _, _, _, placement in out["sample"]}
    assert [(rank, ok) for rank, ok, _ in out["pooled"]] == [(rank, True) for rank in sorted(one)[:6]]
    assert all(placement == one[rank] for rank, _, placement in out["pooled"])


@pytest.mark.slow
def test_megatrons_parallel_state_and_the_process_group_are_released_after_simulating(
    checks: tuple[dict[str, Any], Path],
) -> None:
    assert checks[0]["released"] == (False, False)


@pytest.mark.slow
def test_model_built_builds_a_shrunken_model_with_embeddings_only_on_the_end_stages(
    checks: tuple[dict[str, Any], Path],
) -> None:
    out, root = checks
    assert out["shrunk"] == (4, 256, "inference", "local")
    assert [(rank, state, ok, error) for rank, state, ok, error, _ in out["model"]] == [
        (0, "MODEL_BUILT", True, None),
        (1024, "MODEL_BUILT", True, None),
        (4095, "MODEL_BUILT", True, None),
    ]
    first, middle, last = (params for *_, params in out["model"])
    assert first > last > middle  # first stage: word + position embeddings; last: output layer; middle: layers only
    audit = lifecycle("audit", str(root / "model"))
    assert audit.returncode == 0 and "simulated 3 of 4096: clean" in audit.stdout


@pytest.mark.slow
def test_model_built_with_context_parallelism_and_a_bad_expert_count_are_refused_by_field(
    checks: tuple[dict[str, Any], Path],
) -> None:
    assert checks[0]["refused"] == ["parallel.cp", "model.num_moe_experts"]


@pytest.mark.slow
def test_a_config_not_prepared_for_simulation_or_a_rank_outside_the_job_is_refused(
    checks: tuple[dict[str, Any], Path],
) -> None:
    unprepared, outside = checks[0]["unsimulatable"]
    assert "backend fake" in unprepared and "prepare(config" in unprepared
    assert "ranks must lie in [0, 4096); got [4096]" in outside


@pytest.mark.slow
def test_the_sampled_logs_audit_clean_as_a_partial_simulated_set(checks: tuple[dict[str, Any], Path]) -> None:
    audit = lifecycle("audit", str(checks[1] / "sample"), "--format", "json")
    report = json.loads(audit.stdout)
    assert audit.returncode == 0 and report["findings"] == [] and report["errors"] == []
    assert report["simulated"] == {"ranks": 16, "world_size": 4096}


@pytest.mark.slow
def test_simulating_ranks_0_and_4095_of_gpt_4096_exits_0_and_audits_clean(tmp_path: Path) -> None:
    logs = tmp_path / "D"
    run = lifecycle("simulate", "--preset", "gpt-4096", "--ranks", "0,4095", "--log-dir", str(logs), "--format", "json")
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert (report["world_size"], report["until"], report["ok"]) == (4096, "DISTRIBUTED", True)
    assert [(r["rank"], r["state"], r["agrees"]) for r in report["ranks"]] == [
        (0, "DISTRIBUTED", True),
        (4095, "DISTRIBUTED", True),
    ]
    assert report["ranks"][1]["placement"]["embedding_group"] == [1023, 4095]
    assert sorted(p.name for p in logs.iterdir()) == [".lifecycle.lock", "rank-00000.jsonl", "rank-04095.jsonl"]
    audit = lifecycle("audit", str(logs))
    assert audit.returncode == 0, audit.stdout
    assert "ranks 0,4095 (2 ranks), simulated 2 of 4096: clean" in audit.stdout
    assert "LA014" not in audit.stdout


# -- docs/simulate.md --------------------------------------------------------------------------------

SESSION = re.compile(r"<!-- session -->\n```console\n(.*?)```", re.S)


def _normalize(text: str) -> list[str]:
    text = re.sub(r"sim-[0-9a-f]{8}", "sim-…", text)
    text = re.sub(r"\d+\.\d+", "N", text)
    return [line.rstrip() for line in text.strip().splitlines()]


def _session() -> list[tuple[str, list[str]]]:
    """(command, expected output lines) for each `$ ` line of the tested sessions in docs/simulate.md."""
    steps: list[tuple[str, list[str]]] = []
    for block in SESSION.findall((ROOT / "docs" / "simulate.md").read_text()):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            else:
                steps[-1][1].append(line)
    return steps


def test_the_docs_show_a_simulate_then_audit_session() -> None:
    commands = [command for command, _ in _session()]
    assert any(c.startswith("lifecycle simulate") and "--log-dir" in c for c in commands)
    assert any(c.startswith("lifecycle audit") for c in commands)


@pytest.mark.slow
@pytest.mark.release_independent
def test_the_simulate_then_audit_session_in_the_docs_runs_as_written(tmp_path: Path) -> None:
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": os.environ.get("HOME", "/tmp")}
    for command, expected in _session():
        status = re.fullmatch(r"\[exit (\d+)\]", expected[-1]) if expected else None
        lines = expected[:-1] if status else expected
        run = subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert run.returncode == (int(status.group(1)) if status else 0), (command, run.stderr[-2000:])
        assert _normalize(run.stdout + run.stderr) == _normalize("\n".join(lines)), command
