"""Your provider on real megatron-core (CPU, one spawned rank runs every case): loaded by module path
and by file path, in our shape and in Megatron-LM's; bad return values refused at MODEL_BUILT with a
ProviderError before megatron's DDP wrap; a two-deep wrapper that copies its config binds and
finalizes once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lifecycle.launchers.local import run_ranks

pytestmark = pytest.mark.slow
FILE = str(Path(__file__).with_name("provider_cases.py"))
GOOD = [
    "provider_cases:ours",
    "provider_cases:model_provider",
    f"{FILE}:ours",
    f"{FILE}:model_provider",
    f"{FILE}:closure_provider",
    "gpt-builder",
    "hybrid-builder",
]
BAD = ["hides_config", "returns_list", "returns_tuple", "returns_module_list", "returns_none"]


def _drive(provider: Any, log_dir: str) -> dict[str, Any]:
    from lifecycle import Lifecycle, LifecycleError, PhaseFailed, RunConfig
    from lifecycle.core_entry.train import train_steps
    from lifecycle.core_entry.user_providers import resolve_provider
    from states import State

    out: dict[str, Any] = {}
    config = RunConfig.preset("tiny-gpt", [f"logging.log_dir={log_dir}"])
    try:
        with Lifecycle(config, resolve_provider(provider)) as lc:
            lc.advance_to(State.CALLBACKS_BOUND)
            report = lc.runtime.binding
            out["copied"] = report.copied if report else None
            out["finalizer_calls"] = train_steps(lc, 1)[0].finalizer_calls
            out["state"] = lc.state.name
    except LifecycleError as exc:
        cause = (exc.__cause__ or exc) if isinstance(exc, PhaseFailed) else exc
        out["error"] = type(cause).__name__
        out["message"] = str(cause)
        out["context"] = {k: getattr(cause, k, None) for k in ("provider", "chunk", "returned")}
    return out


def _cases(log_root: str) -> dict[str, Any]:
    names = {
        **{spec: spec for spec in GOOD},
        **{name: f"provider_cases:{name}" for name in BAD},
        "two_deep": "provider_cases:two_deep_copying",
    }
    return {name: _drive(spec, f"{log_root}/{index}") for index, (name, spec) in enumerate(names.items())}


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    result: dict[str, Any] = run_ranks(_cases, 1, str(tmp_path_factory.mktemp("providers")))[0]
    return result


@pytest.mark.parametrize("spec", GOOD)
def test_a_provider_by_module_or_file_path_in_either_shape_trains_a_step(cases: dict[str, Any], spec: str) -> None:
    assert cases[spec].get("error") is None, cases[spec]
    assert cases[spec]["state"] == "CALLBACKS_BOUND" and cases[spec]["finalizer_calls"] == 1


def test_megatron_lm_shape_keeps_its_own_config_and_binding_follows_the_model(cases: dict[str, Any]) -> None:
    assert cases["provider_cases:model_provider"]["copied"] is True
    assert cases["provider_cases:ours"]["copied"] is False


@pytest.mark.parametrize(
    ("name", "returned", "says"),
    [
        ("hides_config", "Wrapper", "with no .config, and no .module holding one (its submodules: .net)"),
        ("returns_list", "list", "a list of 1; return one module per call"),
        ("returns_tuple", "tuple", "a tuple of 1; return one module per call"),
        ("returns_module_list", "ModuleList", "a ModuleList of 1; return one module per call"),
        ("returns_none", "NoneType", "None, not a torch.nn.Module"),
    ],
)
def test_a_bad_return_value_is_a_provider_error_naming_provider_chunk_value_and_fix(
    cases: dict[str, Any], name: str, returned: str, says: str
) -> None:
    case = cases[name]
    assert case["error"] == "ProviderError", case
    assert case["context"] == {"provider": f"provider_cases:{name}", "chunk": 0, "returned": returned}
    assert f"provider provider_cases:{name} returned for chunk 0 (pre_process=True" in case["message"]
    assert says in case["message"]


def test_a_two_deep_wrapper_that_copies_its_config_binds_it_and_finalizes_once(cases: dict[str, Any]) -> None:
    case = cases["two_deep"]
    assert case.get("error") is None, case
    assert case["copied"] is True and case["finalizer_calls"] == 1
