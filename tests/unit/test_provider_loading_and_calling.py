"""Your provider, without megatron: how a `--provider` value is read and loaded, which of the two
shapes a callable has and how it is then called, how it is named in errors, and how deep megatron's
`get_model_config` is followed. Pinned down for scripts/mutation (`core_entry.user_providers`)."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lifecycle.core_entry.providers import PROVIDERS
from lifecycle.core_entry.user_providers import (
    BUILDERS,
    MegatronLMProvider,
    NoInputsProvider,
    adapt,
    display_name,
    load_provider,
    name_of,
    reachable_config,
    resolve_provider,
    spec_problem,
)
from lifecycle.errors import ProviderError

HERE = Path(__file__)


@pytest.mark.parametrize(
    "spec", ["gpt", "copying", "gpt-builder", "hybrid-builder", "my_pkg.models:model_provider", f"{HERE}:anything"]
)
def test_a_known_name_a_module_path_or_an_existing_file_is_a_valid_spec(spec: str) -> None:
    assert spec_problem(spec) is None


@pytest.mark.parametrize("spec", ["omni", ":model_provider", "my_pkg.models:", "my_pkg.models:1st"])
def test_a_spec_without_module_or_function_is_refused_with_an_example(spec: str) -> None:
    problem = spec_problem(spec)
    assert problem is not None and "neither a known provider" in problem
    assert "--provider my_pkg.models:model_provider" in problem


def test_a_file_spec_naming_no_file_says_so() -> None:
    problem = spec_problem("no/such/file.py:model_provider")
    assert problem is not None and "no file 'no/such/file.py'" in problem


def test_known_names_load_the_provider_and_a_fresh_builder() -> None:
    assert load_provider("gpt") is PROVIDERS["gpt"]
    first, second = load_provider("gpt-builder"), load_provider("gpt-builder")
    assert type(first) is BUILDERS["gpt-builder"] and first is not second


def test_a_bad_spec_is_a_provider_error_naming_it() -> None:
    with pytest.raises(ProviderError, match="neither a known provider") as caught:
        load_provider("omni")
    assert caught.value.provider == "omni"  # type: ignore[attr-defined]


def test_a_missing_function_lists_the_modules_public_callables(tmp_path: Path) -> None:
    path = tmp_path / "models.py"
    path.write_text("X = 1\ndef zeta(): pass\ndef alpha(): pass\ndef _hidden(): pass\n")
    with pytest.raises(ProviderError, match=r"has no attribute 'model_provider'; its callables: alpha, zeta$"):
        load_provider(f"{path}:model_provider")
    empty = tmp_path / "empty.py"
    empty.write_text("X = 1\n")
    with pytest.raises(ProviderError, match="its callables: none$"):
        load_provider(f"{empty}:model_provider")


def test_a_module_that_cannot_be_imported_is_named_with_the_fix() -> None:
    with pytest.raises(ProviderError, match="cannot import module 'no_such_pkg_xyz.models'.*PYTHONPATH") as caught:
        load_provider("no_such_pkg_xyz.models:model_provider")
    assert isinstance(caught.value.__cause__, ImportError)


def test_a_module_path_loads_the_function(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mutant_provider_pkg.py").write_text("def model_provider(pre_process=True): return 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_provider("mutant_provider_pkg:model_provider")() == 7


def test_a_file_is_loaded_once_and_a_failed_load_leaves_nothing_behind(tmp_path: Path) -> None:
    path = tmp_path / "counted.py"
    path.write_text(
        "import builtins\nbuiltins.__dict__.setdefault('_loads', []).append(1)\n"
        "def model_provider(): return len(builtins._loads)\n"
    )
    import builtins

    try:
        assert load_provider(f"{path}:model_provider") is load_provider(f"{path}:model_provider")
        assert builtins._loads == [1]  # type: ignore[attr-defined]
    finally:
        del builtins._loads  # type: ignore[attr-defined]
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('half-written provider')\ndef model_provider(): pass\n")
    for _ in range(2):  # the second try runs the file again: no half-loaded module was kept
        with pytest.raises(RuntimeError, match="half-written provider"):
            load_provider(f"{broken}:model_provider")
    assert not any(name.startswith("lifecycle_provider_file_broken") for name in sys.modules)


def model_provider(pre_process: bool = True, post_process: bool = True, vp_stage: int | None = None) -> Any:
    return ("lm", pre_process, post_process, vp_stage)


def lm_without_vp(pre_process: bool = True, post_process: bool = True) -> Any:
    return ("lm2", pre_process, post_process)


def lm_kwargs(pre_process: bool = True, **kwargs: Any) -> Any:
    return ("lmkw", pre_process, kwargs)


def no_inputs(config: Any, *, pre_process: bool, post_process: bool, vp_stage: int | None) -> Any:
    return ("noin", config, pre_process, post_process, vp_stage)


def ours(config: Any, *, pre_process: bool, post_process: bool, vp_stage: int | None, inputs: Any) -> Any:
    return ("ours", config, inputs)


def only_kwargs(**kwargs: Any) -> Any:
    return ("kw", kwargs)


def neither(config: Any, vp_stage: int | None = None) -> Any:
    return None


CALL = {"pre_process": True, "post_process": False, "vp_stage": 1, "inputs": "IN"}


def test_our_shape_and_a_kwargs_only_callable_are_used_as_they_are() -> None:
    assert adapt(ours, "ours") is ours
    assert adapt(only_kwargs, "kw") is only_kwargs


def test_a_callable_without_a_signature_is_assumed_to_be_ours() -> None:
    with pytest.raises(ValueError):
        inspect.signature(max)
    assert adapt(max, "max") is max


def test_megatron_lms_shape_is_called_without_the_config_and_with_vp_stage_when_it_takes_one() -> None:
    with_vp = adapt(model_provider, "m:model_provider")
    assert isinstance(with_vp, MegatronLMProvider) and with_vp.name == "m:model_provider"
    assert with_vp("CFG", **CALL) == ("lm", True, False, 1)
    without = adapt(lm_without_vp, "m:lm")
    assert isinstance(without, MegatronLMProvider) and without("CFG", **CALL) == ("lm2", True, False)
    kwargs = adapt(lm_kwargs, "m:kw")
    assert isinstance(kwargs, MegatronLMProvider)
    assert kwargs("CFG", **CALL) == ("lmkw", True, {"post_process": False, "vp_stage": 1})


def test_our_shape_without_inputs_gets_the_config_and_no_inputs() -> None:
    adapted = adapt(no_inputs, "m:no_inputs")
    assert isinstance(adapted, NoInputsProvider) and adapted.name == "m:no_inputs"
    assert adapted("CFG", **CALL) == ("noin", "CFG", True, False, 1)


def test_a_callable_of_neither_shape_is_refused_naming_its_signature_and_both_shapes() -> None:
    says = r"provider m:neither has the signature \(config: 'Any', vp_stage"
    with pytest.raises(ProviderError, match=says) as caught:
        adapt(neither, "m:neither")
    assert "model_provider(pre_process=True" in str(caught.value)
    assert caught.value.provider == "m:neither"  # type: ignore[attr-defined]


class Callable:
    def __call__(self, config: Any, *, pre_process: bool, post_process: bool, vp_stage: int | None, inputs: Any) -> Any:
        return "instance"

    def method(self, pre_process: bool = True) -> Any:
        return "method"


def test_a_provider_is_named_by_module_and_qualname_or_its_wrappers_name() -> None:
    assert name_of(ours) == f"{__name__}:ours"
    assert name_of(Callable()) == f"{__name__}:Callable"
    assert name_of(Callable().method) == f"{__name__}:Callable.method"
    assert name_of(adapt(model_provider, "given:name")) == "given:name"
    assert name_of(adapt(no_inputs, "other:name")) == "other:name"


def test_a_provider_from_a_file_is_named_by_the_file(tmp_path: Path) -> None:
    path = tmp_path / "filed.py"
    path.write_text("def model_provider(pre_process=True, post_process=True): pass\n")
    assert name_of(load_provider(f"{path}:model_provider")) == f"{path}:model_provider"


def test_resolving_a_spec_loads_and_adapts_it_and_a_callable_is_adapted_under_its_name() -> None:
    assert resolve_provider(None) is PROVIDERS["gpt"]
    assert resolve_provider(f"{__name__}:ours") is ours
    adapted = resolve_provider(f"{__name__}:model_provider")
    assert isinstance(adapted, MegatronLMProvider) and adapted.name == f"{__name__}:model_provider"
    direct = resolve_provider(model_provider)
    assert isinstance(direct, MegatronLMProvider) and direct.name == f"{__name__}:model_provider"
    with pytest.raises(ProviderError, match="provider=42 is not callable") as caught:
        resolve_provider(42)
    assert caught.value.provider == "42"  # type: ignore[attr-defined]


def test_errors_name_the_provider_as_the_user_gave_it() -> None:
    assert display_name(None) == "gpt"
    assert display_name("pkg:fn") == "pkg:fn"
    assert display_name(ours) == f"{__name__}:ours"


def _wrapped(depth: int, config: Any) -> Any:
    inner = SimpleNamespace(config=config)
    for _ in range(depth):
        inner = SimpleNamespace(module=inner)
    return inner


def test_the_config_is_found_directly_or_through_up_to_32_modules() -> None:
    assert reachable_config(SimpleNamespace(config="C", module=SimpleNamespace(config="D"))) == "C"
    assert reachable_config(_wrapped(1, "C")) == "C"
    assert reachable_config(_wrapped(32, "C")) == "C"
    assert reachable_config(_wrapped(33, "C")) is None
    assert reachable_config(SimpleNamespace(net=SimpleNamespace(config="C"))) is None
    looped = SimpleNamespace()
    looped.module = looped
    assert reachable_config(looped) is None


def test_a_provider_is_resolved_once_named_as_given_and_frozen() -> None:
    import dataclasses

    from lifecycle.core_entry.user_providers import Provider

    resolved = Provider.of("gpt")
    assert resolved.name == "gpt" and resolved.call is resolve_provider("gpt")
    assert Provider.of(resolved) is resolved, "a Provider is used as it is, not resolved again"
    with pytest.raises(dataclasses.FrozenInstanceError):
        resolved.name = "other"  # type: ignore[misc]


def test_an_object_with_provide_builds_from_itself_and_asks_for_its_own_fields_as_given() -> None:
    import dataclasses

    from lifecycle.core_entry.user_providers import ProvideObject

    @dataclasses.dataclass
    class BridgeShaped:
        hidden_dropout: float = 0.2
        layers: list[int] = dataclasses.field(default_factory=lambda: [1])

        def provide(self, pre_process: bool = True, post_process: bool = True, vp_stage: Any = None) -> Any:
            return ("provided", self, pre_process, post_process, vp_stage)

    class NoVpStage:
        def provide(self, pre_process: bool, post_process: bool) -> Any:
            return ("plain", pre_process, post_process)

    given = BridgeShaped()
    adapted = resolve_provider(given)
    assert isinstance(adapted, ProvideObject) and adapted.name.endswith("BridgeShaped")
    assert adapted("CFG", **CALL) == ("provided", given, True, False, 1)  # the lifecycle's config is not passed
    given.layers.append(2)  # changed after it was given: what was asked stays as it was
    assert adapted.asked is not None and adapted.asked.transformer == {"hidden_dropout": 0.2, "layers": [1]}
    plain = adapt(NoVpStage(), "m:plain")  # type: ignore[arg-type]
    assert isinstance(plain, ProvideObject) and plain.asked is None
    assert plain("CFG", **CALL) == ("plain", True, False)
    assert resolve_provider(adapted) is adapted  # resolved once: resolving it again changes nothing


def test_a_model_builder_or_model_config_builds_from_its_own_transformer_as_given() -> None:
    import dataclasses

    from lifecycle.core_entry.user_providers import BuilderObject

    @dataclasses.dataclass
    class Transformer:
        hidden_dropout: float = 0.2

    @dataclasses.dataclass
    class ModelConfigShaped:
        transformer: Transformer = dataclasses.field(default_factory=Transformer)

        def get_builder_cls(self) -> type:
            return BuilderShaped

    class BuilderShaped:
        def __init__(self, model_config: ModelConfigShaped) -> None:
            self._model_config = model_config

        def build_model(self, pg_collection: Any, pre_process: Any = None, post_process: Any = None) -> Any:
            return self._model_config

    config = ModelConfigShaped()
    from_config, from_builder = resolve_provider(config), adapt(BuilderShaped(config), "m:builder")  # type: ignore[arg-type]
    for adapted in (from_config, from_builder):
        assert isinstance(adapted, BuilderObject) and adapted.own_config is config.transformer
        assert adapted.asked is not None and adapted.asked.transformer == {"hidden_dropout": 0.2}
    assert isinstance(from_config.builder, BuilderShaped) and from_config.builder._model_config is config
    config.transformer.hidden_dropout = 0.0  # changed after it was given: what was asked stays as it was
    assert from_builder.asked is not None and from_builder.asked.transformer == {"hidden_dropout": 0.2}
    assert not isinstance(resolve_provider(BuilderShaped.build_model), BuilderObject)  # a function named so is not
    with pytest.raises(ProviderError, match=r"BuilderShaped has the signature .* fits no provider shape"):
        resolve_provider(BuilderShaped)  # the class, not a builder: named, and refused
