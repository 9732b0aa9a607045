"""`lifecycle simulate` records, per state, the process groups, collectives and store operations of
each simulated rank; `lifecycle audit --blame`, the Chrome export and the report show them. Store
operations are counted on the store the groups use: a real backend's show, the fake backend makes
none."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from lifecycle.cli import main


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    log_dir = tmp_path_factory.mktemp("sim")
    megatron = ["--set", "distributed.groups=megatron"]  # megatron's creation: every group of the job on every rank
    assert main(["simulate", "--preset", "gpt-4096", "--ranks", "0,4095", *megatron, "--log-dir", str(log_dir)]) == 0
    return log_dir


def test_blame_shows_the_process_groups_each_rank_created(simulated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["audit", str(simulated), "--blame"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.strip().startswith("DISTRIBUTED") and "(" in line)
    collectives, groups, store_ops = row.split()[1:7:2]
    assert int(groups) > 1000 and int(collectives) >= 0  # megatron makes every group on every rank
    assert int(store_ops) == 0  # the fake backend's groups never touch the store (docs/observability.md)


def test_the_trace_and_the_report_carry_the_counts(simulated: Path, tmp_path: Path) -> None:
    assert main(["export", str(simulated), "-o", str(tmp_path / "t.json")]) == 0
    events = orjson.loads((tmp_path / "t.json").read_bytes())["traceEvents"]
    distributed = [e for e in events if e.get("name") == "DISTRIBUTED" and e["ph"] == "X"]
    assert len(distributed) == 2 and all(e["args"]["process_groups"] > 1000 for e in distributed)
    assert main(["report", str(simulated), "-o", str(tmp_path / "r.html")]) == 0
    assert '"process_groups":[' in (tmp_path / "r.html").read_text()


def test_store_operations_are_counted_on_the_store_every_group_of_the_job_uses() -> None:
    """What `counting` wraps is the store torch and the backend really use: on gloo, creating the
    default group and one more makes operations on it (its address exchange), counted per state."""
    import torch.distributed as dist

    from lifecycle.testing import counting

    with counting() as counts:
        counts.state = "DISTRIBUTED"
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        try:
            dist.new_group([0])
            counts.state = "MODEL_BUILT"
            dist.barrier()
        finally:
            dist.destroy_process_group()
    assert counts.table["DISTRIBUTED"]["process_groups"] == 2
    assert counts.table["DISTRIBUTED"]["store_ops"] >= 2 * 3  # per group: its address set, waited for, read back
    assert counts.table["MODEL_BUILT"] == {"process_groups": 0, "collectives": 1, "store_ops": 0}
