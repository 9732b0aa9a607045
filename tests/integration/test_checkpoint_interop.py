"""A GPTModel checkpoint resumed by the HybridModel that replaces it (megatron-core 0.19, 2 CPU ranks).

Before 0.19 the shipped providers build GPTModel, from 0.19 HybridModel (`compat.gpt_model_deprecated`):
a run that upgrades megatron-core between a save and its resume loads a GPTModel checkpoint into a
HybridModel. Here a provider wrapping `gpt_provider` (not a shipped one, so it gets the GPT-shaped
config and builds GPTModel, as the shipped providers did on 0.18) trains 3 steps and saves; the
shipped `gpt` provider (HybridModel) loads it and trains 3 more. Its weights after the load are the
saved ones, bit for bit, and its 3 losses are those of the GPTModel run continuing to 6 steps (the
Adam moments came through too). The way back, a HybridModel checkpoint into a GPTModel, is refused
naming both classes. One spawned group runs every case.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from lifecycle.launchers.local import run_ranks

pytestmark = pytest.mark.slow


class GPTModelProvider:
    """`gpt_provider` behind a provider of the user's: the GPT-shaped config, so a GPTModel."""

    def __call__(self, config: Any, **kwargs: Any) -> Any:
        from lifecycle.core_entry.providers import gpt_provider

        return gpt_provider(config, **kwargs)


def _config(root: str, name: str, *overrides: str) -> Any:
    from lifecycle import RunConfig

    return RunConfig.preset("tiny-gpt", ["model.hidden_size=32", f"logging.log_dir={root}/logs/{name}", *overrides])


def _digests(lc: Any) -> list[str]:
    return [
        hashlib.sha256(p.detach().cpu().numpy().tobytes()).hexdigest()[:16]
        for chunk in lc.runtime.model or ()
        for p in chunk.parameters()
    ]


def _run(config: Any, steps: int, provider: Any) -> dict[str, Any]:
    """Build (loading when the config says so), the weights then, `steps` steps, save when asked."""
    from lifecycle import Lifecycle, LifecycleError, PhaseFailed
    from lifecycle.core_entry.train import checkpoint_step, save_after_steps, train_steps
    from states import State

    try:
        with Lifecycle(config, provider) as lc:
            lc.advance_to(State.CALLBACKS_BOUND)
            from megatron.core.utils import unwrap_model

            out: dict[str, Any] = {
                "model": type(unwrap_model(list(lc.runtime.model or ()))[0]).__name__,
                "loaded": _digests(lc),
            }
            start = checkpoint_step(lc.runtime)
            out["losses"] = [(r.step, r.loss) for r in train_steps(lc, steps)]
            out["saved"] = _digests(lc)
            save_after_steps(lc, start + steps)
            return out
    except LifecycleError as exc:
        cause = (exc.__cause__ or exc) if isinstance(exc, PhaseFailed) else exc
        return {"error": type(cause).__name__, "message": str(cause)}


def _cases(root: str) -> dict[str, Any]:
    gpt = GPTModelProvider()
    return {
        "six": _run(_config(root, "six"), 6, gpt),
        "first": _run(_config(root, "first", f"checkpoint.save={root}/gpt-ck"), 3, gpt),
        "second": _run(_config(root, "second", f"checkpoint.load={root}/gpt-ck"), 3, "gpt"),
        "pp2": _run(_config(root, "pp2", f"checkpoint.load={root}/gpt-ck", "parallel.pp=2"), 3, "gpt"),
        "hybrid": _run(_config(root, "hybrid", f"checkpoint.save={root}/hybrid-ck"), 1, "gpt"),
        "back": _run(_config(root, "back", f"checkpoint.load={root}/hybrid-ck"), 1, gpt),
    }


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("interop")


@pytest.fixture(scope="module")
def cases(root: Path) -> list[dict[str, Any]]:
    from lifecycle.core_entry.compat import gpt_model_deprecated

    if not gpt_model_deprecated():
        pytest.skip("megatron-core before 0.19: the shipped providers build GPTModel, nothing to translate")
    result: list[dict[str, Any]] = run_ranks(_cases, 2, str(root), timeout_s=600)
    return result


def _loaded_event(root: Path, name: str, rank: int) -> dict[str, Any]:
    lines = (root / "logs" / name / f"rank-{rank:05d}.jsonl").read_text().splitlines()
    event: dict[str, Any] = next(json.loads(line) for line in lines if '"checkpoint_loaded"' in line)
    return event


def test_a_gptmodel_checkpoint_resumes_in_the_hybridmodel_with_its_weights_and_optimizer_state(
    cases: list[dict[str, Any]],
    root: Path,
) -> None:
    for index, rank in enumerate(cases):
        first, second = rank["first"], rank["second"]
        assert "error" not in first and "error" not in second, (first, second)
        assert (first["model"], second["model"]) == ("GPTModel", "HybridModel")
        assert second["loaded"] == first["saved"]  # every parameter, bit for bit, in the same order
        assert second["loaded"] != second["saved"]  # and the resumed steps train
        assert first["losses"] + second["losses"] == rank["six"]["losses"]
        assert [step for step, _ in second["losses"]] == [4, 5, 6]
        event = _loaded_event(root, "second", index)
        assert (event["retargeted_from"], event["step"], event["optimizer"]) == ("GPTModel", 3, True)


def test_a_hybridmodel_checkpoint_into_a_gptmodel_is_refused_naming_both_and_the_fix(
    cases: list[dict[str, Any]],
) -> None:
    # Each rank refuses it itself, or first hears (failure broadcast) that its peer did.
    assert {rank["back"]["error"] for rank in cases} <= {"ConfigError", "DistributedError"}, cases
    own = [rank["back"]["message"] for rank in cases if rank["back"]["error"] == "ConfigError"]
    assert own, "at least the first rank to refuse names the reason as its own error"
    for message in own:
        assert "\n" not in message and message.startswith("checkpoint.load=")
        assert "saved by a HybridModel" in message and "builds a GPTModel" in message
        assert "megatron-core >= 0.19" in message


def test_the_gptmodel_checkpoint_is_resharded_onto_a_two_stage_hybridmodel_pipeline(
    cases: list[dict[str, Any]],
    root: Path,
) -> None:
    """Saved with pp=1 (dp=2), resumed with pp=2: each stage's HybridModel layers (`*-|*-`) get
    their GPT block's saved weights, every one of them (none keeps its fresh initialization)."""
    saved = set(cases[0]["first"]["saved"])
    for index, rank in enumerate(cases):
        pp2 = rank["pp2"]
        assert "error" not in pp2 and pp2["model"] == "HybridModel", pp2
        assert pp2["loaded"] and set(pp2["loaded"]) <= saved
        assert _loaded_event(root, "pp2", index)["retargeted_from"] == "GPTModel"
    assert [step for step, _ in cases[1]["pp2"]["losses"]] == [4, 5, 6]
