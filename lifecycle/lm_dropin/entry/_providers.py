"""Model providers in every shape a Megatron-LM user has, called the way Megatron-LM's `get_model`
calls them: by keyword (`pre_process=`, `post_process=`, `vp_stage=`, `config=`, `pg_collection=`).

Accepted: Megatron-LM's keyword `model_provider` (any subset of those keywords), the lifecycle's
shape (`provider(config, *, pre_process, post_process, vp_stage, inputs)`), a `ModelBuilder`, a
`ModelConfig` (its builder), and Megatron-Bridge-shaped objects with `.provide(...)`. Anything
else is refused at VALIDATED by `problem()`, in at most 300 characters. A provider that raises is
reported with its name and file:line.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, cast

from lifecycle.errors import ProviderError

if TYPE_CHECKING:
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.module import MegatronModule
    from megatron.training.models.base import ModelBuilder, ModelConfig

    from lifecycle.runtime import ModelInputs

KEYWORDS = ("pre_process", "post_process", "vp_stage", "config", "pg_collection")
INSTEAD = (
    "pass a function model_provider(pre_process, post_process, vp_stage=None, config=None, "
    "pg_collection=None), a ModelBuilder, a ModelConfig, or an object with .provide()"
)


def where(obj: object) -> str:
    """file:line where `obj` (or its class) was defined, or its module when that is unknown."""
    obj = obj.func if isinstance(obj, functools.partial) else obj
    target = obj if inspect.isfunction(obj) or inspect.ismethod(obj) or inspect.isclass(obj) else type(obj)
    target = inspect.unwrap(target) if callable(target) else target
    try:
        file = inspect.getsourcefile(target) or "?"
        line = inspect.getsourcelines(target)[1]
        return f"{file}:{line}"
    except (TypeError, OSError):
        return getattr(target, "__module__", "?") or "?"


def name(obj: object) -> str:
    target = getattr(obj, "func", obj)
    if not (inspect.isfunction(target) or inspect.ismethod(target)):
        target = type(target)
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}"


def _kind(obj: object) -> str | None:
    """How to call `obj`: builder, model_config, bridge, lifecycle, keyword; None if unusable."""
    try:
        from megatron.training.models.base import ModelBuilder, ModelConfig
    except ImportError:  # pragma: no cover - the package needs megatron.training
        return None
    if isinstance(obj, ModelBuilder):
        return "builder"
    if isinstance(obj, ModelConfig):
        return "model_config"
    if inspect.isclass(obj):  # a provider's class where its instance belongs (`GPTModelProvider`, not `(...)`)
        return None
    if callable(getattr(obj, "provide", None)):
        return "bridge"
    if not callable(obj):
        return None
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return None
    if "inputs" in params:
        return "lifecycle"
    if "pre_process" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return "keyword"
    return None


def problem(obj: object) -> str | None:
    """Why `obj` cannot be a model provider (≤ 300 characters), or None when it can (or is None)."""
    if obj is None or _kind(obj) is not None:
        return None
    head, place, tail = f"model_provider: a {type(obj).__name__} (defined at ", where(obj), ") is not a model provider"
    room = 300 - len(head) - len(tail) - len(f"; {INSTEAD}")  # the fix is never cut: the place is
    if len(place) > room:
        place = "…" + place[len(place) - max(room - 1, 0) :]
    return f"{head}{place}{tail}; {INSTEAD}"[:300]


class _Bridge(Protocol):
    """A Megatron-Bridge-shaped provider: `.provide(...)` builds the model."""

    def provide(self, *args: object, **kwargs: object) -> MegatronModule: ...


class KeywordProvider:
    """Any accepted shape, callable as Megatron-LM's `get_model` calls a provider."""

    def __init__(
        self, obj: object, *, transformer_config: TransformerConfig | None = None, inputs: ModelInputs | None = None
    ) -> None:
        self.obj, self.kind = obj, _kind(obj)
        self.transformer_config, self.inputs = transformer_config, inputs
        self.name = name(obj)

    def __call__(
        self,
        pre_process: bool = True,
        post_process: bool = True,
        vp_stage: int | None = None,
        config: TransformerConfig | None = None,
        pg_collection: ProcessGroupCollection | None = None,
    ) -> MegatronModule:
        given = {
            "pre_process": pre_process,
            "post_process": post_process,
            "vp_stage": vp_stage,
            "config": config,
            "pg_collection": pg_collection,
        }
        try:
            return self._call(given)
        except ProviderError:
            raise
        except Exception as exc:
            raise ProviderError(
                f"model provider {self.name} (defined at {where(self.obj)}) raised {type(exc).__name__}: {exc}",
                provider=self.name,
            ) from exc

    def _call(self, given: dict[str, object]) -> MegatronModule:
        """Call `self.obj` as its kind (`_kind`, which checked the shape each cast names)."""
        obj, stage = self.obj, {k: given[k] for k in ("pre_process", "post_process", "vp_stage")}
        if self.kind == "builder":
            return cast("ModelBuilder", obj).build_model(given["pg_collection"], **stage)
        if self.kind == "model_config":
            model_config = cast("ModelConfig", obj)
            return model_config.get_builder_cls()(model_config).build_model(given["pg_collection"], **stage)
        if self.kind == "bridge":
            return _by_keyword(cast(_Bridge, obj).provide, given)
        provider = cast("Callable[..., MegatronModule]", obj)
        if self.kind == "lifecycle":
            config = given["config"] if given["config"] is not None else self.transformer_config
            return provider(config, inputs=self.inputs, **stage)
        return _by_keyword(provider, given)


def _by_keyword(fn: Callable[..., MegatronModule], given: dict[str, object]) -> MegatronModule:
    """Call `fn` with the keywords its signature takes (all of them with **kwargs)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return fn(**{k: v for k, v in given.items() if v is not None or k in ("pre_process", "post_process")})
    return fn(**{k: v for k, v in given.items() if k in params})
