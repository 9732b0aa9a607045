"""`scripts/gpu-check`'s own logic, on CPU, with its CUDA parts stubbed (the device, the install, the
cases' bodies): its case list is the seven the GPU must show; each case prints one JSON line, a case
that fails, crashes or hangs does not stop the others and a hung one is killed with what it started;
the time budget holds; the summary counts them; without CUDA it exits at once with one line. The
store benchmark's case runs for real at 16 ranks, so that its reading of the benchmark's output
cannot drift from what the benchmark prints."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.release_independent
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu-check"
SEVEN = [
    "te_layer_spec_every_state",
    "nccl_eager_init_in_distributed",
    "lazy_nccl_group_after_callbacks_bound",
    "verify_resume_cuda",
    "distributed_optimizer_resume",
    "pretrain_mamba_dropin",
    "store_4096_ranks",
]


@pytest.fixture
def gpu_check(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("gpu_check_script", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, loader.name, module)
    loader.exec_module(module)
    return module


def stub(gpu_check: ModuleType, name: str, code: str, limit_s: float = 60.0, gpu: bool = True) -> Any:
    return gpu_check.Case(name, limit_s, gpu, (sys.executable, "-c", code))


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def gone(pid: int, within_s: float = 10.0) -> bool:
    """Not alive within `within_s` (a SIGKILL is delivered, not waited for)."""
    deadline = time.monotonic() + within_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def lines_of(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_the_cases_are_the_seven_the_gpu_must_show_each_with_a_body_within_the_budget(gpu_check: ModuleType) -> None:
    assert [c.name for c in gpu_check.CASES] == SEVEN
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gpu_check_cases
    finally:
        sys.path.remove(str(SCRIPT.parent))
    assert list(gpu_check_cases.CASES) == SEVEN
    assert set(gpu_check.NEEDS) <= set(SEVEN)
    assert [c.name for c in gpu_check.CASES if not c.gpu] == ["store_4096_ranks"]
    assert gpu_check.BUDGET_S == 480  # the 8 minutes, the install included
    assert sum(c.limit_s for c in gpu_check.CASES if c.gpu) <= gpu_check.BUDGET_S - 30


def test_each_case_prints_one_line_and_one_that_fails_crashes_or_hangs_does_not_stop_the_others(
    gpu_check: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hang = "import time; time.sleep(120)"
    cases = (
        stub(
            gpu_check,
            "passes",
            "print('{\"passed\": true, \"losses\": [1.5]}'); print('a last line that is no figure')",
        ),
        stub(gpu_check, "fails", 'import sys; print(\'{"passed": false, "missing": ["x"]}\'); sys.exit(1)'),
        stub(gpu_check, "crashes", "raise RuntimeError('boom')"),
        stub(gpu_check, "hangs", hang, limit_s=3),
        stub(gpu_check, "beside", 'print(\'{"passed": true, "p99_ratio": 1.02}\')', gpu=False),
    )
    monkeypatch.setattr(gpu_check, "CASES", cases)
    monkeypatch.setattr(gpu_check, "device_name", lambda: "Stub GPU")
    monkeypatch.setattr(gpu_check, "install", lambda: gpu_check.Outcome("install", "passed", {"packages": 6}, 0.1))

    assert gpu_check.main([]) == gpu_check.EXIT_FAILED
    out = capsys.readouterr().out
    lines = lines_of(out)
    by_case = {line["case"]: line for line in lines if "case" in line}
    assert [line["case"] for line in lines if "case" in line] == [
        "install",
        "passes",
        "fails",
        "crashes",
        "hangs",
        "beside",
    ]
    assert by_case["passes"] == {
        "case": "passes",
        "result": "passed",
        "figures": {"losses": [1.5]},
        "seconds": by_case["passes"]["seconds"],
    }
    assert by_case["fails"]["result"] == "failed" and by_case["fails"]["figures"] == {"missing": ["x"]}
    assert by_case["crashes"]["result"] == "failed" and "RuntimeError: boom" in by_case["crashes"]["error"]
    assert by_case["hangs"]["error"].startswith("killed at its limit, 3 s") and by_case["hangs"]["seconds"] < 60
    assert by_case["beside"]["result"] == "passed" and by_case["beside"]["figures"] == {"p99_ratio": 1.02}
    [summary] = [line["summary"] for line in lines if "summary" in line]
    assert summary["device"] == "Stub GPU"
    assert summary["passed"] == ["install", "passes", "beside"]
    assert summary["failed"] == ["fails", "crashes", "hangs"]
    assert out.splitlines()[-1].startswith("gpu-check: 3 passed, 3 failed in ")


def test_a_hung_case_is_killed_with_the_processes_it_started(gpu_check: ModuleType, tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild"
    hang = (
        "import subprocess, sys, time; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], "
        "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
        f"open({str(pid_file)!r}, 'w').write(str(child.pid)); time.sleep(120)"
    )
    case = stub(gpu_check, "hangs", hang, limit_s=5)
    proc = gpu_check.start(case, [])
    outcome = gpu_check.finish(case, proc, gpu_check.time.monotonic(), 5)
    assert outcome.result == "failed" and outcome.error.startswith("killed at its limit, 5 s")
    assert proc.returncode == -9
    assert gone(int(pid_file.read_text()))


def test_no_case_outlives_the_time_budget(gpu_check: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    cases = (
        stub(gpu_check, "slow", "import time; time.sleep(60)", limit_s=30),
        stub(gpu_check, "after", "print('{\"passed\": true}')"),
    )
    slow, after = gpu_check.run_cases(cases, budget_s=2.0)
    assert slow.result == "failed" and slow.error.startswith("killed at its limit, 2 s")
    assert after.result == "failed" and after.error == "not started: the time budget was spent"


def test_without_cuda_it_exits_at_once_with_one_line_installing_nothing(tmp_path: Path) -> None:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", GPU_CHECK_SITE=str(tmp_path / "site"))
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines() == [
        "gpu-check: no CUDA device here (torch.cuda.is_available() is False): nothing installed or run"
    ]
    assert not (tmp_path / "site").exists()


def test_the_install_takes_the_carried_wheels_when_there_are_some_else_the_pinned_requirements(
    gpu_check: ModuleType, tmp_path: Path
) -> None:
    wheels, site = tmp_path / "whl", tmp_path / "site"
    wheels.mkdir()
    registry = gpu_check.install_command(wheels, site)
    assert "--no-index" not in registry and registry[-len(gpu_check.REQUIREMENTS) :] == list(gpu_check.REQUIREMENTS)
    assert registry[registry.index("--target") + 1] == str(site)
    for name in ("orjson-3.13.0-cp312-cp312-manylinux2014_x86_64.whl", "structlog-26.1.0-py3-none-any.whl"):
        (wheels / name).touch()
    carried = gpu_check.install_command(wheels, site)
    assert {"--no-index", "--no-deps"} <= set(carried)
    assert carried[carried.index("--target") + 1 :] == [str(site), *sorted(str(p) for p in wheels.glob("*.whl"))]


@pytest.mark.slow
def test_the_store_case_reads_the_figures_the_benchmark_prints() -> None:
    env = dict(os.environ, GPU_CHECK_STORE_RANKS="16", PYTHONPATH=str(ROOT))
    command = [sys.executable, str(SCRIPT), "--case", "store_4096_ranks"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False, cwd=ROOT)
    [figures] = [line for line in lines_of(done.stdout) if "passed" in line]
    assert figures["ranks"] == 16 and figures["exit"] == 0, done.stderr[-2000:]
    for name in ("p99_ratio", "node_lost_known_by_all_s", "check_in_s"):
        assert isinstance(figures[name], float), (name, figures)
    assert figures["p99_ratio_per_pair"] is not None
    assert done.returncode == (0 if figures["passed"] else 1)
