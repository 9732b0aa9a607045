"""`lifecycle run` launched the other ways users launch it: by srun (only SLURM_* variables) and by
Open MPI's mpirun (only OMPI_* variables)."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from lifecycle.launchers import port_for
from lifecycle.testing import PORT_BASE, PORT_SPAN

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _job_id_with_a_free_port() -> int:
    for _ in range(100):
        job = random.randrange(10**6, 10**7)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port_for(str(job))))
            except OSError:
                continue
        assert PORT_BASE <= port_for(str(job)) < PORT_BASE + PORT_SPAN
        return job
    raise RuntimeError("no free port in the launchers' port range")


def _two_tasks(env_of: dict[int, dict[str, str]], logs: Path, *args: str) -> list[tuple[str, str]]:
    """Start `lifecycle run` as tasks 0 and 1, each with only PYTHONPATH, PATH and `env_of[task]`."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "lifecycle", "run", *args, "--log-dir", str(logs), "--set", "model.hidden_size=32"],
            cwd=ROOT,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", **env_of[task]},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for task in (0, 1)
    ]
    outputs = []
    try:
        outputs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outputs]
    return outputs


def _assert_ranks_0_and_1_bound(logs: Path, run_id: str) -> None:
    for rank in (0, 1):
        records = [json.loads(line) for line in (logs / f"rank-{rank:05d}.jsonl").read_text().splitlines()]
        assert {r["rank"] for r in records} == {rank}
        assert {r["world_size"] for r in records} == {2}
        assert {r["run_id"] for r in records} == {run_id}
        assert any(r.get("dest") == "CALLBACKS_BOUND" for r in records)


@pytest.mark.release_independent
def test_two_srun_tasks_with_only_slurm_variables_reach_callbacks_bound_as_ranks_0_and_1(tmp_path: Path) -> None:
    job, logs = _job_id_with_a_free_port(), tmp_path / "logs"
    env_of = {
        task: {
            "SLURM_PROCID": str(task),
            "SLURM_NTASKS": "2",
            "SLURM_LOCALID": str(task),
            "SLURM_JOB_NODELIST": "localhost",
            "SLURM_JOB_ID": str(job),
            "SLURM_STEP_ID": "0",
        }
        for task in (0, 1)
    }
    outputs = _two_tasks(env_of, logs, "--steps", "1")
    assert "2 rank(s)" in outputs[0][0] and "✓ CALLBACKS_BOUND" in outputs[0][0]
    _assert_ranks_0_and_1_bound(logs, f"slurm-{job}.0")


@pytest.mark.release_independent
def test_two_mpirun_ranks_with_only_open_mpi_variables_reach_callbacks_bound_as_ranks_0_and_1(
    tmp_path: Path,
) -> None:
    """What Open MPI 4 sets in each rank of `mpirun -n 2` on one node; the rendezvous is derived
    (127.0.0.1, a port from the job id)."""
    job, logs = _job_id_with_a_free_port(), tmp_path / "logs"
    env_of = {
        rank: {
            "OMPI_COMM_WORLD_RANK": str(rank),
            "OMPI_COMM_WORLD_SIZE": "2",
            "OMPI_COMM_WORLD_LOCAL_RANK": str(rank),
            "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
            "OMPI_MCA_ess_base_jobid": str(job),
        }
        for rank in (0, 1)
    }
    outputs = _two_tasks(env_of, logs, "--steps", "0")
    assert "2 rank(s)" in outputs[0][0] and "✓ CALLBACKS_BOUND" in outputs[0][0]
    _assert_ranks_0_and_1_bound(logs, f"ompi-{job}")


def _lifecycle(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lifecycle", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=400,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


@pytest.mark.release_independent  # the CLI's save and load; checkpoints per release: test_checkpoints.py
def test_lifecycle_run_saves_after_its_steps_and_a_second_run_continues_from_the_checkpoint(tmp_path: Path) -> None:
    ck, common = str(tmp_path / "ck"), ["--nproc", "2", "--steps", "2", "--set", "model.hidden_size=32"]
    first = _lifecycle("run", *common, "--log-dir", str(tmp_path / "a"), "--set", f"checkpoint.save={ck}")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "step 2/2: loss" in first.stdout and f"saved checkpoint {ck}/iter_0000002" in first.stdout
    second = _lifecycle("run", *common, "--log-dir", str(tmp_path / "b"), "--set", f"checkpoint.load={ck}")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed from the checkpoint of step 2" in second.stdout
    assert "step 3/4: loss" in second.stdout and "step 4/4: loss" in second.stdout
    for logs in ("a", "b"):
        audit = _lifecycle("audit", str(tmp_path / logs), "--format", "json")
        assert audit.returncode == 0 and json.loads(audit.stdout)["findings"] == [], audit.stdout[-2000:]
    loaded = [json.loads(x) for x in (tmp_path / "b" / "rank-00001.jsonl").read_text().splitlines()]
    assert [r["step"] for r in loaded if r["event"] == "checkpoint_loaded"] == [2]


@pytest.mark.release_independent
def test_two_launchers_as_two_nodes_meet_at_the_rendezvous_endpoint_and_share_one_run(tmp_path: Path) -> None:
    from lifecycle.launchers.local import free_port

    endpoint, logs = f"127.0.0.1:{free_port()}", tmp_path / "logs"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lifecycle",
                "run",
                "--nproc",
                "1",
                "--nnodes",
                "2",
                "--node-rank",
                str(node),
                "--rdzv-endpoint",
                endpoint,
                "--steps",
                "1",
                "--log-dir",
                str(logs),
                "--set",
                "model.hidden_size=32",
            ],
            cwd=ROOT,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node in (0, 1)
    ]
    outputs = []
    try:
        outputs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outputs]
    assert "2 rank(s)" in outputs[0][0] and "step 1/1: loss" in outputs[0][0]
    run_ids = set()
    for rank in (0, 1):
        records = [json.loads(line) for line in (logs / f"rank-{rank:05d}.jsonl").read_text().splitlines()]
        assert any(r.get("dest") == "CALLBACKS_BOUND" for r in records)
        run_ids |= {r["run_id"] for r in records}
    assert run_ids == {endpoint}
