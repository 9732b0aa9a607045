"""Checkpoints on 2 CPU ranks with megatron's dist_checkpointing (one spawned group runs every case):
3 steps and save, then a new lifecycle that loads and trains 3 more, gives the losses of 6
uninterrupted steps; `restart()` after a fault resumes from the saved checkpoint; a missing
checkpoint is refused at VALIDATED, a corrupt one at MODEL_BUILT, each with a clear error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from lifecycle.engine.launch import run_ranks

pytestmark = pytest.mark.slow


class FailsOnSecondBuild:
    """The tiny GPT provider, raising on its second build (the fault a restart recovers from)."""

    def __init__(self) -> None:
        self.builds = 0

    def __call__(self, config: Any, **kwargs: Any) -> Any:
        from lifecycle.megatron.providers import gpt_provider

        self.builds += 1
        if self.builds == 2:
            raise RuntimeError("injected fault in the provider")
        return gpt_provider(config, **kwargs)


def _config(root: str, name: str, *overrides: str) -> Any:
    from lifecycle import RunConfig

    return RunConfig.preset("tiny-gpt", ["model.hidden_size=32", f"logging.log_dir={root}/logs/{name}", *overrides])


def _losses(lc: Any, steps: int) -> list[tuple[int, float | None]]:
    from lifecycle.megatron.train import train_steps

    return [(r.step, r.loss) for r in train_steps(lc, steps)]


def _run(config: Any, steps: int, provider: Any = "gpt") -> dict[str, Any]:
    from lifecycle import Lifecycle, LifecycleError, PhaseFailed
    from lifecycle.megatron.checkpoint import save_after_steps
    from lifecycle.megatron.train import checkpoint_step
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
    from lifecycle.megatron.checkpoint import save_after_steps
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


def _cases(root: str) -> dict[str, Any]:
    import os

    out = {
        "six": _run(_config(root, "six"), 6),
        "first": _run(_config(root, "first", f"checkpoint.save={root}/first-ck"), 3),
    }
    out["second"] = _run(_config(root, "second", f"checkpoint.load={root}/first-ck"), 3)
    out["restart"] = _restart_case(root)
    out["missing"] = _run(_config(root, "missing", f"checkpoint.load={root}/no-such-ck"), 1)
    if os.environ["RANK"] == "0":  # every shard truncated: both ranks fail to read, none waits
        shutil.copytree(f"{root}/first-ck", f"{root}/corrupt-ck")
        for shard in Path(f"{root}/corrupt-ck").rglob("*.distcp"):
            shard.write_bytes(shard.read_bytes()[:64])
    import time

    while not Path(f"{root}/corrupt-ck/latest_checkpointed_iteration.txt").exists():
        time.sleep(0.1)
    time.sleep(0.5)
    out["corrupt"] = _run(_config(root, "corrupt", f"checkpoint.load={root}/corrupt-ck"), 1)
    return out


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ckpt")


@pytest.fixture(scope="module")
def cases(root: Path) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = run_ranks(_cases, 2, str(root), timeout_s=900)
    return result


def failed_transition(root: Path, name: str, rank: int) -> str:
    lines = (root / "logs" / name / f"rank-{rank:05d}.jsonl").read_text().splitlines()
    failed = [json.loads(line) for line in lines if '"transition_failed"' in line]
    return str(failed[0]["source"]) if failed else "none"


def test_three_steps_saved_then_three_loaded_give_the_losses_of_six_uninterrupted(cases: list[dict[str, Any]]) -> None:
    for rank in cases:
        assert rank["first"]["losses"] + rank["second"]["losses"] == rank["six"]["losses"]
        assert [s for s, _ in rank["second"]["losses"]] == [4, 5, 6]


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
