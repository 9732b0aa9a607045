"""Checkpoints on 2 CPU ranks with megatron's dist_checkpointing (one spawned group runs every case):
3 steps and save, then a new lifecycle that loads and trains 3 more, gives the losses of 6
uninterrupted steps; the distributed optimizer with a checkpoint is refused at VALIDATED on this
CPU machine (no Apex or Transformer Engine: megatron-core's own code cannot save or load it);
`restart()` after a fault resumes from the saved checkpoint; a missing or empty checkpoint is
refused at VALIDATED, a corrupt one at MODEL_BUILT, each with a clear error naming the file; a save
that fails on a full disk leaves no `iter_*` directory and the marker where it was."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lifecycle.launchers.local import run_ranks

pytestmark = pytest.mark.slow


class FailsOnSecondBuild:
    """The tiny GPT provider, raising on its second build (the fault a restart recovers from)."""

    def __init__(self) -> None:
        self.builds = 0

    def __call__(self, config: Any, **kwargs: Any) -> Any:
        from lifecycle.core_entry.providers import gpt_provider

        self.builds += 1
        if self.builds == 2:
            raise RuntimeError("injected fault in the provider")
        return gpt_provider(config, **kwargs)


def _config(root: str, name: str, *overrides: str) -> Any:
    from lifecycle import RunConfig

    return RunConfig.preset("tiny-gpt", ["model.hidden_size=32", f"logging.log_dir={root}/logs/{name}", *overrides])


def _losses(lc: Any, steps: int) -> list[tuple[int, float | None]]:
    from lifecycle.core_entry.train import train_steps

    return [(r.step, r.loss) for r in train_steps(lc, steps)]


def _run(config: Any, steps: int, provider: Any = "gpt") -> dict[str, Any]:
    from lifecycle import Lifecycle, LifecycleError, PhaseFailed
    from lifecycle.core_entry.train import checkpoint_step, save_after_steps
    from states import State

    try:
        with Lifecycle(config, provider) as lc:
            lc.advance_to(State.CALLBACKS_BOUND)
            start = checkpoint_step(lc.runtime)
            losses = _losses(lc, steps)
            save_after_steps(lc, start + steps)
            return {"losses": losses, "vocab_source": lc.runtime.vocab_source}
    except LifecycleError as exc:
        cause = (exc.__cause__ or exc) if isinstance(exc, PhaseFailed) else exc
        return {"error": type(cause).__name__, "message": str(cause), "state": str(getattr(exc, "state", ""))}


def _restart_case(root: str) -> dict[str, Any]:
    from lifecycle import Lifecycle, LifecycleError
    from lifecycle.core_entry.train import save_after_steps
    from states import State

    config = _config(root, "restart", f"checkpoint.save={root}/restart-ck")
    out: dict[str, Any] = {}
    with Lifecycle(config, FailsOnSecondBuild()) as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        out["before"] = _losses(lc, 3)
        save_after_steps(lc, 3)
        lc.rebuild()
        try:
            lc.advance_to(State.CALLBACKS_BOUND)
        except LifecycleError:
            out["failed_state"] = lc.state.name
        lc.restart()
        lc.advance_to(State.CALLBACKS_BOUND)
        out["after"] = _losses(lc, 3)
    return out


DISTOPT = {
    "distopt": ["ddp.use_distributed_optimizer=true"],
    "distopt-overlap": [
        "ddp.use_distributed_optimizer=true",
        "ddp.overlap_grad_reduce=true",
        "ddp.overlap_param_gather=true",
    ],
}


def _resumed(root: str, name: str, extra: list[str]) -> dict[str, Any]:
    """6 uninterrupted steps, and 3 saved + 3 loaded, with the optimizer settings `extra`."""
    return {
        "six": _run(_config(root, f"{name}-six", *extra), 6),
        "first": _run(_config(root, f"{name}-first", f"checkpoint.save={root}/{name}-ck", *extra), 3),
        "second": _run(_config(root, f"{name}-second", f"checkpoint.load={root}/{name}-ck", *extra), 3),
    }


def _full_disk_case(root: str, disk: str) -> dict[str, Any]:
    """Save step 1 on a small tmpfs, fill it, then try to save step 2: a real ENOSPC mid-save."""
    import errno
    import os

    import torch.distributed as dist

    from lifecycle import Lifecycle
    from lifecycle.core_entry.train import save_after_steps
    from states import State

    out: dict[str, Any] = {}
    with Lifecycle(_config(root, "fulldisk", f"checkpoint.save={disk}/ck"), "gpt") as lc:
        lc.advance_to(State.CALLBACKS_BOUND)
        _losses(lc, 1)
        save_after_steps(lc, 1)
        if os.environ["RANK"] == "0":
            try:
                with open(f"{disk}/filler", "wb") as filler:
                    while True:
                        filler.write(b"\0" * 65536)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
        dist.barrier()
        _losses(lc, 1)
        try:
            save_after_steps(lc, 2)
        except BaseException as exc:  # torch's CheckpointException is a BaseException
            out["error"] = type(exc).__name__
        out["listing"] = sorted(p for p in os.listdir(f"{disk}/ck"))
        out["latest"] = Path(f"{disk}/ck/latest_checkpointed_iteration.txt").read_text().strip()
    return out


def _cases(root: str) -> dict[str, Any]:
    import os

    out: dict[str, Any] = {"plain": _resumed(root, "plain", [])}
    out.update(out["plain"])
    for name, extra in DISTOPT.items():  # refused before any side effect, so before any step
        out[name] = {
            "save": _run(_config(root, f"{name}-save", f"checkpoint.save={root}/{name}-ck", *extra), 3),
            "load": _run(_config(root, f"{name}-load", f"checkpoint.load={root}/plain-ck", *extra), 3),
        }
    out["restart"] = _restart_case(root)
    out["missing"] = _run(_config(root, "missing", f"checkpoint.load={root}/no-such-ck"), 1)
    Path(f"{root}/empty-ck").mkdir(exist_ok=True)
    out["empty"] = _run(_config(root, "empty", f"checkpoint.load={root}/empty-ck"), 1)
    if os.environ["RANK"] == "0":  # every shard truncated: both ranks fail to read, none waits
        shutil.copytree(f"{root}/plain-ck", f"{root}/corrupt-ck")
        for shard in Path(f"{root}/corrupt-ck").rglob("*.distcp"):
            shard.write_bytes(shard.read_bytes()[:64])
        shutil.copytree(f"{root}/plain-ck", f"{root}/random-ck")  # every file random bytes
        for file in (Path(f"{root}/random-ck") / "iter_0000003").iterdir():
            file.write_bytes(os.urandom(max(file.stat().st_size, 16)))
    import time

    for name in ("corrupt", "random"):
        while not Path(f"{root}/{name}-ck/latest_checkpointed_iteration.txt").exists():
            time.sleep(0.1)
    time.sleep(0.5)
    out["corrupt"] = _run(_config(root, "corrupt", f"checkpoint.load={root}/corrupt-ck"), 1)
    out["random"] = _run(_config(root, "random", f"checkpoint.load={root}/random-ck"), 1)
    return out


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ckpt")


@pytest.fixture(scope="module")
def disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A 4 MiB tmpfs for checkpoints (one save of the tiny model fits), or '' where none can be mounted."""
    where = tmp_path_factory.mktemp("ckdisk")
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)], capture_output=True, check=False
        ).returncode
        == 0
    )
    yield str(where) if mounted else ""
    if mounted:
        subprocess.run(["umount", str(where)], check=False)


@pytest.fixture(scope="module")
def cases(root: Path) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = run_ranks(_cases, 2, str(root), timeout_s=900)
    return result


@pytest.fixture(scope="module")
def full_disk(root: Path, disk: str) -> dict[str, Any] | None:
    """The full-disk save on one rank (its own spawned process), or None without a tmpfs."""
    if not disk:
        return None
    result: list[dict[str, Any]] = run_ranks(_full_disk_case, 1, str(root), disk, timeout_s=600)
    return result[0]


def failed_transition(root: Path, name: str, rank: int) -> str:
    lines = (root / "logs" / name / f"rank-{rank:05d}.jsonl").read_text().splitlines()
    failed = [json.loads(line) for line in lines if '"transition_failed"' in line]
    return str(failed[0]["source"]) if failed else "none"


def test_three_steps_saved_then_three_loaded_give_the_losses_of_six_uninterrupted(cases: list[dict[str, Any]]) -> None:
    for rank in cases:
        run = rank["plain"]
        assert "error" not in run["first"] and "error" not in run["second"], run
        assert run["first"]["losses"] + run["second"]["losses"] == run["six"]["losses"]
        assert [s for s, _ in run["second"]["losses"]] == [4, 5, 6]


@pytest.mark.parametrize("optimizer", sorted(DISTOPT))
def test_distributed_optimizer_checkpoints_without_apex_or_te_are_refused_at_validated(
    cases: list[dict[str, Any]], root: Path, optimizer: str
) -> None:
    for index, rank in enumerate(cases):
        for way in ("save", "load"):
            refused = rank[optimizer][way]
            assert refused["error"] == "ConfigError", refused
            assert refused["message"].startswith("the config has 1 problem(s)"), refused
            assert "ddp.use_distributed_optimizer" in refused["message"] and f"checkpoint.{way}" in refused["message"]
            assert failed_transition(root, f"{optimizer}-{way}", index) == "CONFIGURED"  # nothing ran
    assert not (root / f"{optimizer}-ck").exists()


def test_a_save_is_published_only_once_every_rank_has_written_it(root: Path, cases: list[dict[str, Any]]) -> None:
    assert sorted(p.name for p in (root / "plain-ck").iterdir()) == [
        "iter_0000003",
        "latest_checkpointed_iteration.txt",
    ]
    assert (root / "plain-ck" / "iter_0000003" / "metadata.json").is_file()


def test_a_save_that_fails_on_a_full_disk_leaves_no_iteration_and_the_marker_as_it_was(
    full_disk: dict[str, Any] | None,
) -> None:
    if full_disk is None:
        pytest.skip("no tmpfs can be mounted here (needs root): the full-disk save is not exercised")
    # torch's CheckpointException (0.19) or the writer's RuntimeError (0.15.3): the save raised
    assert full_disk.get("error") in ("CheckpointException", "RuntimeError"), full_disk
    assert full_disk["listing"] == ["iter_0000001", "latest_checkpointed_iteration.txt"], full_disk
    assert full_disk["latest"] == "1"


def test_an_empty_checkpoint_directory_is_refused_at_validated(cases: list[dict[str, Any]]) -> None:
    for rank in cases:
        empty = rank["empty"]
        assert empty["message"].startswith("the config has 1 problem(s)"), empty
        assert "checkpoint.load" in empty["message"] and "holds no checkpoint" in empty["message"]


def test_random_bytes_in_a_checkpoint_are_refused_naming_the_file_and_the_field(cases: list[dict[str, Any]]) -> None:
    for rank in cases:
        random = rank["random"]
        assert random["error"] in ("ConfigError", "DistributedError"), random
        if random["error"] == "ConfigError":
            assert "checkpoint.load=" in random["message"]
            assert "iter_0000003/metadata.json" in random["message"], random["message"]


def test_the_vocab_size_comes_from_the_checkpoint(cases: list[dict[str, Any]]) -> None:
    assert [rank["second"]["vocab_source"] for rank in cases] == ["checkpoint", "checkpoint"]


def test_restart_after_a_fault_resumes_from_the_saved_checkpoint(cases: list[dict[str, Any]]) -> None:
    for rank in cases:
        restart = rank["restart"]
        assert restart["failed_state"] == "FAILED"
        assert restart["before"] + restart["after"] == rank["six"]["losses"]


def test_a_missing_checkpoint_is_refused_at_validated(cases: list[dict[str, Any]]) -> None:
    for rank in cases:
        assert rank["missing"]["message"].startswith("the config has 1 problem(s)")  # VALIDATED's raise_for
        missing = rank["missing"]
        assert missing["error"] == "ConfigError" and "checkpoint.load" in missing["message"]
        assert "no-such-ck" in missing["message"]


def test_a_corrupt_checkpoint_is_refused_at_model_built_naming_it(cases: list[dict[str, Any]], root: Path) -> None:
    own = []
    for index, rank in enumerate(cases):
        assert failed_transition(root, "corrupt", index) == "DISTRIBUTED"  # build_model, from DISTRIBUTED
        corrupt = rank["corrupt"]
        # Each rank fails on the corrupt shards itself, or first hears (failure broadcast) that its
        # peer did: then its error names the peer's ConfigError.
        assert corrupt["error"] in ("ConfigError", "DistributedError"), corrupt
        assert "iter_0000003 cannot be loaded" in corrupt["message"] and "corrupt" in corrupt["message"]
        own.append(corrupt["error"] == "ConfigError")
    assert any(own), "at least the first rank to fail names the corrupt checkpoint as its own error"
