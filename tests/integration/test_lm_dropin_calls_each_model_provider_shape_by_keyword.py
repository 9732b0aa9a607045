"""The drop-in takes a model provider in every shape a Megatron-LM user has and calls it as
Megatron-LM's `get_model` does, by keyword, in one process with megatron's real `ModelBuilder` and
`ModelConfig`: Megatron-LM's keyword function gets the keywords it names (all of them with
`**kwargs`), the lifecycle's shape its config and inputs, a builder or model config its
`build_model`, a Megatron-Bridge object its `.provide`. Anything else is refused at VALIDATED in
at most 300 characters naming its type and where it was defined; a provider that raises is named
with its file:line. The providers return what they were given instead of a model (building one is
tests/integration/test_megatron_lm_providers.py's, on a rank)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

from megatron.training.models.base import ModelBuilder, ModelConfig

from lifecycle.errors import ProviderError
from lifecycle.testing import KeywordProvider, provider_problem

HERE = Path(__file__).name
INSTEAD = (
    "pass a function model_provider(pre_process, post_process, vp_stage=None, config=None, "
    "pg_collection=None), a ModelBuilder, a ModelConfig, or an object with .provide()"
)
GIVEN = {"pre_process": False, "post_process": True, "vp_stage": 1, "config": "the config", "pg_collection": "groups"}


def line_of(obj: Any) -> str:
    return f"{HERE}:{inspect.getsourcelines(obj)[1]}"


def megatron_lms(pre_process: bool, post_process: bool, vp_stage: int | None = None) -> dict[str, Any]:
    return {"pre_process": pre_process, "post_process": post_process, "vp_stage": vp_stage}


def any_keyword(**kwargs: Any) -> dict[str, Any]:
    return kwargs


def lifecycles(config: Any, *, pre_process: bool, post_process: bool, vp_stage: int | None, inputs: Any) -> Any:
    return {"config": config, "pre_process": pre_process, "post_process": post_process, "vp_stage": vp_stage, **inputs}


class Bridge:
    def provide(self, pre_process: bool, vp_stage: int | None = None) -> dict[str, Any]:
        return {"provide": True, "pre_process": pre_process, "vp_stage": vp_stage}


class FailingBridge:
    def provide(self, pre_process: bool) -> None:
        raise RuntimeError("no bridge")

    def model_provider(self, pre_process: bool, post_process: bool) -> None:
        raise RuntimeError("no method")


class Builder(ModelBuilder):  # type: ignore[misc]  # megatron ships no types
    def build_model(self, pg_collection: Any, pre_process: Any = None, post_process: Any = None, vp_stage: Any = None):  # type: ignore[no-untyped-def]
        made = {"pg_collection": pg_collection, "pre_process": pre_process, "post_process": post_process}
        return {**made, "vp_stage": vp_stage, "built_from": type(self._model_config).__name__}

    def build_distributed_models(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@dataclasses.dataclass
class TinyModelConfig(ModelConfig):  # type: ignore[misc]  # megatron ships no types
    builder: ClassVar[str] = f"{__name__}.Builder"


class NotAProvider:
    """Callable, but takes none of get_model's keywords."""

    def __call__(self, size: int) -> None: ...


def no_keywords(size: int) -> None: ...


class Unreadable:
    """Takes `pre_process`, but says its signature is something inspect cannot read."""

    __signature__ = 3

    def __call__(self, pre_process: bool) -> None: ...


def call(provider: object, **given: Any) -> Any:
    return KeywordProvider(provider, transformer_config="its own config", inputs={"inputs": "model inputs"})(**given)


def test_megatron_lms_keyword_function_gets_the_keywords_it_names() -> None:
    assert call(megatron_lms, **GIVEN) == {"pre_process": False, "post_process": True, "vp_stage": 1}


def test_a_keyword_function_with_kwargs_gets_every_keyword_given_and_both_stage_flags() -> None:
    assert call(any_keyword, **GIVEN) == GIVEN
    assert call(any_keyword) == {"pre_process": True, "post_process": True}


def test_the_lifecycles_shape_gets_the_config_given_else_its_own_and_the_inputs() -> None:
    stage = {"pre_process": False, "post_process": True, "vp_stage": 1}
    assert call(lifecycles, **GIVEN) == {"config": "the config", **stage, "inputs": "model inputs"}
    assert call(lifecycles, **{**GIVEN, "config": None})["config"] == "its own config"


def test_a_bridge_object_is_called_through_provide_by_keyword() -> None:
    assert call(Bridge(), **GIVEN) == {"provide": True, "pre_process": False, "vp_stage": 1}


def test_a_model_builder_and_a_model_config_build_with_the_process_groups_and_the_stage() -> None:
    built = {"pg_collection": "groups", "pre_process": False, "post_process": True, "vp_stage": 1}
    assert call(Builder(TinyModelConfig()), **GIVEN) == {**built, "built_from": "TinyModelConfig"}
    assert call(TinyModelConfig(), **GIVEN) == {**built, "built_from": "TinyModelConfig"}


@pytest.mark.parametrize(
    "provider",
    [None, megatron_lms, any_keyword, lifecycles, Bridge(), Builder(TinyModelConfig()), TinyModelConfig()],
    ids=["none", "keyword", "kwargs", "lifecycle", "bridge", "builder", "model_config"],
)
def test_every_shape_megatron_lm_users_have_is_accepted(provider: object) -> None:
    assert provider_problem(provider) is None


def test_a_callable_taking_none_of_the_keywords_is_refused_naming_its_type_and_line() -> None:
    for obj, kind, defined in ((no_keywords, "function", no_keywords), (NotAProvider(), "NotAProvider", NotAProvider)):
        message = provider_problem(obj)
        assert message is not None and message.startswith(f"model_provider: a {kind} (defined at …")
        assert message.endswith(f"{line_of(defined)}) is not a model provider; {INSTEAD}") and len(message) == 300


HEAD = "model_provider: a function (defined at "
TAIL = f") is not a model provider; {INSTEAD}"


def provider_at(monkeypatch: pytest.MonkeyPatch, directory: Path) -> Any:
    """`build(size)` (no keyword of get_model's) defined on line 1 of `directory`/p.py."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "p.py").write_text("def build(size):\n    return size\n")
    monkeypatch.syspath_prepend(str(directory))
    monkeypatch.delitem(sys.modules, "p", raising=False)
    from p import build  # type: ignore[import-not-found]

    monkeypatch.delitem(sys.modules, "p")
    return build


@pytest.mark.parametrize("over", [0, 1])
def test_a_refusal_names_the_whole_place_while_it_fits_in_300_characters(
    monkeypatch: pytest.MonkeyPatch, over: int
) -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as short:
        room = 300 - len(HEAD) - len(TAIL)  # what the place may take
        pad = room - len(f"{short}/x/p.py:1") + over
        place = f"{short}/{'x' * (pad + 1)}/p.py:1"
        message = provider_problem(provider_at(monkeypatch, Path(place.removesuffix("/p.py:1"))))
    assert message is not None and message.endswith(TAIL) and len(message) == 300
    assert message == (f"{HEAD}{place}{TAIL}" if not over else f"{HEAD}…{place[-(room - 1) :]}{TAIL}")


def test_a_provider_without_source_is_placed_by_its_module() -> None:
    cell: dict[str, Any] = {"__name__": "notebook_cell"}
    exec("def build(size):\n    return size\n", cell)  # as a notebook or `python -c` defines it
    assert provider_problem(cell["build"]) == f"{HEAD}notebook_cell{TAIL}"


def test_a_type_name_too_long_for_any_place_still_names_the_type(monkeypatch: pytest.MonkeyPatch) -> None:
    kind = "Provider" + "X" * 120
    message = provider_problem(type(kind, (), {})())
    assert message is not None and message.startswith(f"model_provider: a {kind} (defined at …) is not a model")
    assert len(message) == 300


@pytest.mark.parametrize(
    ("obj", "kind", "where"),
    [
        (Bridge, "type", HERE),  # Megatron-Bridge's provider class where its instance belongs
        (NotAProvider, "type", HERE),
        (3, "int", "builtins"),
        ("gpt", "str", "builtins"),
        (print, "builtin_function_or_method", "builtins"),
        (max, "builtin_function_or_method", "builtins"),  # its signature cannot be read (ValueError)
        (Unreadable(), "Unreadable", HERE),  # nor can its (TypeError)
    ],
)
def test_a_class_or_a_value_is_refused(obj: object, kind: str, where: str) -> None:
    message = provider_problem(obj)
    assert message is not None and message.startswith(f"model_provider: a {kind} (defined at ")
    assert where in message and message.endswith(f") is not a model provider; {INSTEAD}")


def test_a_refusal_from_a_deep_path_is_cut_to_300_characters_keeping_the_files_end_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    deep = tmp_path.joinpath(*["a_directory_of_a_long_name"] * 8)
    deep.mkdir(parents=True)
    (deep / "provider_file.py").write_text("def build(size):\n    return size\n")
    monkeypatch.syspath_prepend(str(deep))
    from provider_file import build  # type: ignore[import-not-found]

    monkeypatch.delitem(sys.modules, "provider_file")

    message = provider_problem(build)
    assert message is not None and len(message) == 300
    head, tail = "model_provider: a function (defined at …", f") is not a model provider; {INSTEAD}"
    assert message.startswith(head) and message.endswith(tail)
    shown = message[len(head) : -len(tail)]
    assert f"{deep / 'provider_file.py'}:1".endswith(shown) and shown.endswith("_name/provider_file.py:1")


def test_a_provider_that_raises_is_named_with_its_file_and_line() -> None:
    def failing(pre_process: bool, post_process: bool) -> None:
        raise ValueError("no weights here")

    with pytest.raises(ProviderError) as caught:
        call(failing)
    name = f"{__name__}.test_a_provider_that_raises_is_named_with_its_file_and_line.<locals>.failing"
    assert str(caught.value) == (
        f"model provider {name} (defined at {Path(__file__)}:{inspect.getsourcelines(failing)[1]}) "
        "raised ValueError: no weights here"
    )
    assert caught.value.provider == name and isinstance(caught.value.__cause__, ValueError)


def test_a_provider_error_from_a_provider_passes_through_as_it_was_raised() -> None:
    error = ProviderError("the provider's own words", provider="mine")

    def refusing(**kwargs: Any) -> None:
        raise error

    with pytest.raises(ProviderError) as caught:
        call(refusing)
    assert caught.value is error


def broken(size: int, pre_process: bool, post_process: bool) -> None:
    raise RuntimeError(f"broken at {size}")


def test_a_decorated_or_partial_provider_is_named_where_its_function_is_defined() -> None:
    @functools.wraps(megatron_lms)
    def logged(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    with pytest.raises(ProviderError) as caught:
        call(logged)
    assert caught.value.provider == f"{__name__}.megatron_lms" and f"{line_of(megatron_lms)})" in str(caught.value)
    with pytest.raises(ProviderError) as caught:
        call(functools.partial(broken, 3))
    assert caught.value.provider == f"{__name__}.broken" and f"{line_of(broken)})" in str(caught.value)
    assert str(caught.value).endswith("raised RuntimeError: broken at 3")


def test_a_bridge_object_or_a_method_that_raises_is_named_by_its_class_and_line() -> None:
    with pytest.raises(ProviderError) as caught:
        call(FailingBridge())
    assert caught.value.provider == f"{__name__}.FailingBridge" and f"{line_of(FailingBridge)})" in str(caught.value)
    with pytest.raises(ProviderError) as caught:
        call(FailingBridge().model_provider)
    assert caught.value.provider == f"{__name__}.FailingBridge.model_provider"
    assert f"{line_of(FailingBridge.model_provider)})" in str(caught.value)


def test_a_provider_wrapped_by_a_decorator_from_another_file_is_named_at_its_own_file_and_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "user_logging.py").write_text(
        "import functools\n\n\ndef logged(fn):\n    @functools.wraps(fn)\n"
        "    def wrapper(*args, **kwargs):\n        return fn(*args, **kwargs)\n\n    return wrapper\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from user_logging import logged  # type: ignore[import-not-found]

    monkeypatch.delitem(sys.modules, "user_logging")

    with pytest.raises(ProviderError) as caught:
        call(logged(broken))
    assert f"/{line_of(broken)})" in str(caught.value)  # its file, not the decorator's
