"""What startup costs: megatron's import is one logged step beside validation (in a fresh process,
where it really happens), and what one rank writes does not grow with the world size.

One spawned process runs every case (`import megatron.core` costs ~7 s per process).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from lifecycle.launchers.local import run_ranks

ROOT = Path(__file__).resolve().parents[2]

# The main thread imports torch (as the environment checks do) while the job is inside torch's own
# import: it must wait for the finished module, not deadlock or see a half-initialized one.
MAIN_THREAD_IMPORTS_DURING_THE_JOB = """
import sys
from lifecycle.testing import ImportJob
job = ImportJob.start(("torch", "torch.distributed", "torch.nn"))
import torch
import torch.nn
assert torch.nn.Linear(2, 2)(torch.ones(1, 2)).shape == (1, 2)
torch.cuda.is_available()
report = job.join()
assert dict(report.failed) == {}, report
print(dict(report.modules))
"""


def _fresh_startup(log_dir: str) -> dict[str, Any]:
    """VALIDATED then SERVICES_READY in a process that has not imported torch or megatron yet."""
    from lifecycle import Lifecycle, RunConfig
    from states import State

    out: dict[str, Any] = {"fresh": "torch" not in sys.modules and "megatron" not in sys.modules}
    config = RunConfig.preset("tiny-gpt")
    with Lifecycle(config, "gpt", log_dir, options={"keep_records": True}) as lc:
        lc.advance_to(State.VALIDATED)
        out["threads_after_validated"] = sorted(t.name for t in threading.enumerate())
        out["megatron_after_validated"] = "megatron.core.models.gpt" in sys.modules
        out["imports"] = [r for r in lc.records if r["event"] == "imports"]
        lc.advance_to(State.CALLBACKS_BOUND)
        out["tokenizer"] = type(lc.runtime.tokenizer).__name__
    out["transformers_loaded"] = "transformers" in sys.modules
    return out


def _counting_store_class() -> Any:
    import torch.distributed as dist

    class CountingStore(dist.Store):  # type: ignore[misc]  # torch's Store is untyped
        """A working in-memory store that counts the keys written through it."""

        def __init__(self) -> None:
            super().__init__()
            self.data: dict[str, bytes] = {}
            self.writes: list[str] = []

        def set(self, key: str, value: Any) -> None:
            self.writes.append(key)
            self.data[key] = value if isinstance(value, bytes) else str(value).encode()

        def get(self, key: str) -> bytes:
            return self.data[key]

        def add(self, key: str, amount: int) -> int:
            self.writes.append(key)
            value = int(self.data.get(key, b"0")) + amount
            self.data[key] = str(value).encode()
            return value

        def check(self, keys: list[str]) -> bool:
            return all(k in self.data for k in keys)

        def wait(self, keys: list[str], timeout: Any = None) -> None:
            return None

        def num_keys(self) -> int:
            return len(self.data)

    return CountingStore


def _normalized_size(line: bytes) -> int:
    """A record's size with every number as 0 and the hashes blanked: what varies with timing only."""

    def walk(value: Any) -> Any:
        if isinstance(value, bool) or value is None or isinstance(value, str):
            return value
        if isinstance(value, int | float):
            return 0
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        return [walk(v) for v in value]

    rec = json.loads(line)
    rec.update(hash="", prev_hash="", run_id="")
    return len(json.dumps(walk(rec), sort_keys=True))


def _one_simulated_rank(log_dir: str, world_size: int, store_class: Any) -> dict[str, Any]:
    import torch.testing._internal.distributed.fake_pg as fake_pg

    from lifecycle import Lifecycle, RunConfig
    from states import State

    stores: list[Any] = []
    original = fake_pg.FakeStore
    fake_pg.FakeStore = lambda: stores.append(store_class()) or stores[-1]
    try:
        config = RunConfig.preset("tiny-gpt", ["backend=fake", f"parallel.world_size={world_size}", "parallel.rank=1"])
        with Lifecycle(config, "gpt", log_dir) as lc:
            lc.advance_to(State.CALLBACKS_BOUND)
            path = lc.log_path
            assert path is not None
            lines = path.read_bytes().splitlines()
    finally:
        fake_pg.FakeStore = original
    return {
        "stores": len(stores),
        "store_keys": sum(len(s.writes) for s in stores),
        "records": len(lines),
        "events": [json.loads(line)["event"] for line in lines],
        "bytes": sum(len(line) + 1 for line in lines),
        "normalized_bytes": sum(_normalized_size(line) for line in lines),
    }


def _cases(root: str) -> dict[str, Any]:
    out = {"startup": _fresh_startup(f"{root}/fresh")}
    store_class = _counting_store_class()
    for world in (2, 4096):
        out[world] = _one_simulated_rank(f"{root}/fake-{world}", world, store_class)
    return out


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("startup-cost")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("LIFECYCLE_RANKS_START", "spawn")  # a fresh interpreter: nothing of torch imported yet
        [result] = run_ranks(_cases, 1, str(root), timeout_s=600)
    result["root"] = root
    return result


def test_megatrons_import_is_one_logged_step_joined_before_validated_completes(cases: dict[str, Any]) -> None:
    startup = cases["startup"]
    assert startup["fresh"]
    [record] = startup["imports"]
    assert set(record["modules"]) == {"torch", "megatron"} and record["failed"] == {}
    assert record["modules"]["megatron"] > 1.0 and record["modules"]["torch"] > 0.2  # really imported here
    assert record["duration_s"] >= record["modules"]["megatron"] + record["modules"]["torch"] - 0.01
    assert 0 < record["waited_s"] <= record["duration_s"] + 0.05
    assert startup["megatron_after_validated"]
    assert "lifecycle-imports" not in startup["threads_after_validated"]  # joined, not left running


def test_the_main_job_never_imports_transformers(cases: dict[str, Any]) -> None:
    assert cases["startup"]["tokenizer"] == "NullTokenizer"
    assert not cases["startup"]["transformers_loaded"]


def test_blame_puts_the_import_time_in_its_own_row_not_in_validated(cases: dict[str, Any]) -> None:
    from lifecycle.audit import audit, blame

    rows = {b.state: b for b in blame(audit([str(cases["root"] / "fresh")], jobs=1).ranks)}
    imports = cases["startup"]["imports"][0]["duration_s"]
    assert rows["imports"].max == pytest.approx(imports, abs=1e-3)
    assert rows["VALIDATED"].max < 0.25 * imports
    assert rows["SERVICES_READY"].max < 0.25 * imports


def test_what_one_rank_writes_during_startup_is_the_same_at_2_and_4096_ranks(cases: dict[str, Any]) -> None:
    small, large = cases[2], cases[4096]
    assert large["stores"] == small["stores"] == 1  # the counting store is the one the rank used
    assert large["events"] == small["events"]
    assert (large["records"], large["store_keys"]) == (small["records"], small["store_keys"])
    assert large["normalized_bytes"] == small["normalized_bytes"]
    # raw bytes differ only by the digits of numbers (world size 4096, timestamps, durations)
    assert abs(large["bytes"] - small["bytes"]) <= 4 * large["records"]


def test_a_main_thread_import_of_torch_during_the_import_job_neither_deadlocks_nor_sees_half_a_module() -> None:
    out = subprocess.run(
        [sys.executable, "-c", MAIN_THREAD_IMPORTS_DURING_THE_JOB],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "torch" in out.stdout
