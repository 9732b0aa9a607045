"""Your provider: found by name or `module:function` / `path/to/file.py:function`, called in either
shape, and its return value checked before megatron wraps it.

Two shapes, told apart by signature:

- ours: `provider(config, *, pre_process, post_process, vp_stage, inputs)` (`inputs` optional);
- Megatron-LM's: `model_provider(pre_process=True, post_process=True, vp_stage=None)`, which finds
  its TransformerConfig itself (closure or globals, as `pretrain_gpt.py` does with `get_args()`);
- an object with `.provide(pre_process, post_process[, vp_stage])`, Megatron-Bridge's shape,
  which builds from its own config;
- Megatron-LM's `ModelBuilder` (`.build_model(pg_collection, pre_process, post_process, vp_stage)`)
  or its `ModelConfig` (`.get_builder_cls()`, the builder made from it), which build from the
  model config's own `transformer`.

What a provider returns must be one `torch.nn.Module` per call (the lifecycle calls it once per
virtual-pipeline chunk) whose config megatron can reach: `.config`, or through `.module`.

`Provider.of(given)` resolves what a user gives (a name, a spec, a callable or None) once, into the
callable in our shape and the name errors give it; the CLI builds it, the entry work takes it as is.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Protocol, TypeGuard, runtime_checkable

from lifecycle.core_entry.providers import PROVIDERS, GPTBuilder, HybridBuilder
from lifecycle.errors import ProviderError
from lifecycle.runtime import BuildsModel, ConfiguresModel, GivenProvider, ModelInputs, ModelProvider, ProvidesModel

if TYPE_CHECKING:
    from megatron.core.transformer import TransformerConfig
    from torch.nn import Module

    from bindings import Requested

BUILDERS: dict[str, type[GPTBuilder] | type[HybridBuilder]] = {
    "gpt-builder": GPTBuilder,
    "hybrid-builder": HybridBuilder,
}
NAMES = (*PROVIDERS, *BUILDERS)
_FILE_MODULE = "lifecycle_provider_file_"
SHAPES = (
    "provider(config, *, pre_process, post_process, vp_stage, inputs) or Megatron-LM's "
    "model_provider(pre_process=True, post_process=True, vp_stage=None), or an object: a ModelBuilder, "
    "a ModelConfig or one with .provide()"
)


def _fail(message: str, provider: str, *, chunk: int | None = None, returned: str | None = None) -> ProviderError:
    return ProviderError(message, provider=provider, chunk=chunk, returned=returned)


def spec_problem(spec: str) -> str | None:
    """What is wrong with a `--provider` value that can be told without importing it; None if fine."""
    if spec in NAMES:
        return None
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr.isidentifier():
        return (
            f"--provider {spec!r} is neither a known provider ({', '.join(NAMES)}) nor "
            "MODULE:FUNCTION or path/to/file.py:FUNCTION; write e.g. --provider my_pkg.models:model_provider"
        )
    if target.endswith(".py") and not Path(target).is_file():
        return f"--provider {spec!r}: no file {target!r}; give an existing .py file, relative to the working directory"
    return None


def load_provider(spec: str) -> Callable[..., Module]:
    """The callable a spec names: a known name, `package.module:function` or `file.py:function`."""
    if spec in PROVIDERS:
        return PROVIDERS[spec]
    if spec in BUILDERS:
        builder: GPTBuilder | HybridBuilder = BUILDERS[spec]()
        return builder
    problem = spec_problem(spec)
    if problem:
        raise _fail(problem, spec)
    target, _, attr = spec.rpartition(":")
    module = _import_file(target, spec) if target.endswith(".py") else _import_module(target, spec)
    if not hasattr(module, attr):
        public = sorted(n for n in vars(module) if callable(getattr(module, n)) and not n.startswith("_"))
        raise _fail(
            f"provider {spec!r}: {target} has no attribute {attr!r}; its callables: {', '.join(public) or 'none'}", spec
        )
    found: Callable[..., Module] = getattr(module, attr)  # checked callable by `resolve_provider`
    return found


def _import_module(name: str, spec: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise _fail(
            f"provider {spec!r}: cannot import module {name!r} ({exc}); put its package on "
            "PYTHONPATH or give a file path, path/to/file.py:FUNCTION",
            spec,
        ) from exc


def _import_file(path: str, spec: str) -> ModuleType:
    resolved = Path(path).resolve()
    name = f"{_FILE_MODULE}{resolved.stem}_{abs(hash(str(resolved))):x}"
    if name in sys.modules:
        return sys.modules[name]
    loader_spec = importlib.util.spec_from_file_location(name, resolved)
    if loader_spec is None or loader_spec.loader is None:
        raise _fail(f"provider {spec!r}: {path!r} cannot be loaded as Python; give a .py file", spec)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception:
        del sys.modules[name]
        raise
    return module


def name_of(provider: GivenProvider | ModelProvider) -> str:
    """module:qualname of a provider (its class for a callable instance)."""
    if isinstance(provider, (MegatronLMProvider, NoInputsProvider, ProvideObject, BuilderObject, Provider)):
        return provider.name
    named = inspect.isfunction(provider) or inspect.ismethod(provider) or inspect.isclass(provider)
    target = provider if named else type(provider)
    module = getattr(target, "__module__", "?")
    if module.startswith(_FILE_MODULE):  # loaded from path/to/file.py: name the file
        module = getattr(sys.modules.get(module), "__file__", module)
    return f"{module}:{getattr(target, '__qualname__', repr(target))}"


class MegatronLMProvider:
    """Calls a Megatron-LM-shaped `model_provider(pre_process, post_process[, vp_stage])` in our shape;
    the TransformerConfig the lifecycle built is not passed (the provider has its own)."""

    def __init__(self, fn: Callable[..., Module], *, name: str, takes_vp_stage: bool) -> None:
        self.fn, self.name, self.takes_vp_stage = fn, name, takes_vp_stage

    def __call__(
        self,
        config: TransformerConfig,
        *,
        pre_process: bool,
        post_process: bool,
        vp_stage: int | None,
        inputs: ModelInputs,
    ) -> Module:
        if self.takes_vp_stage:
            return self.fn(pre_process=pre_process, post_process=post_process, vp_stage=vp_stage)
        return self.fn(pre_process=pre_process, post_process=post_process)


class NoInputsProvider:
    """Calls `provider(config, *, pre_process, post_process, vp_stage)` (ours without `inputs`)."""

    def __init__(self, fn: Callable[..., Module], *, name: str) -> None:
        self.fn, self.name = fn, name

    def __call__(
        self,
        config: TransformerConfig,
        *,
        pre_process: bool,
        post_process: bool,
        vp_stage: int | None,
        inputs: ModelInputs,
    ) -> Module:
        return self.fn(config, pre_process=pre_process, post_process=post_process, vp_stage=vp_stage)


class ProvideObject:
    """A Megatron-Bridge-style provider object: `obj.provide(pre_process, post_process[, vp_stage])`
    builds each chunk from the object's own config (Bridge's `GPTModelProvider` is a TransformerConfig),
    so the lifecycle's config is not passed. `asked`: the object's own fields when it was given (a
    dataclass), what MODEL_BUILT's settings check compares the model with; None for another object."""

    def __init__(self, obj: ProvidesModel, *, name: str) -> None:
        import bindings

        self.obj, self.name = obj, name
        self.own_config: TransformerConfig | None = obj if dataclasses.is_dataclass(obj) else None
        self.asked: Requested | None = bindings.requested(obj) if self.own_config is not None else None
        params = inspect.signature(obj.provide).parameters
        var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        self.takes_vp_stage = "vp_stage" in params or var_kw

    def __call__(
        self,
        config: TransformerConfig,
        *,
        pre_process: bool,
        post_process: bool,
        vp_stage: int | None,
        inputs: ModelInputs,
    ) -> Module:
        extra = {"vp_stage": vp_stage} if self.takes_vp_stage else {}
        return self.obj.provide(pre_process=pre_process, post_process=post_process, **extra)


class BuilderObject:
    """Megatron-LM's `ModelBuilder`, or a `ModelConfig` (its `get_builder_cls()` makes the builder):
    `build_model(pg_collection, pre_process=, post_process=, vp_stage=)` builds each chunk from the
    model config's own `transformer`, with the process groups megatron's `get_model` passes (those
    `initialize_model_parallel` made). `asked`: that transformer config's fields when it was given."""

    def __init__(self, obj: BuildsModel | ConfiguresModel, *, name: str) -> None:
        import bindings

        self.name = name
        self.builder: BuildsModel
        model_config: ConfiguresModel | None
        if isinstance(obj, ConfiguresModel):
            self.builder, model_config = obj.get_builder_cls()(obj), obj
        else:
            self.builder, model_config = obj, getattr(obj, "_model_config", None)
        own = getattr(model_config, "transformer", None)
        self.own_config: TransformerConfig | None = own if dataclasses.is_dataclass(own) else None
        self.asked: Requested | None = bindings.requested(own) if self.own_config is not None else None

    def __call__(
        self,
        config: TransformerConfig,
        *,
        pre_process: bool,
        post_process: bool,
        vp_stage: int | None,
        inputs: ModelInputs,
    ) -> Module:
        from megatron.core.process_groups_config import ProcessGroupCollection

        groups = ProcessGroupCollection.use_mpu_process_groups()
        return self.builder.build_model(groups, pre_process=pre_process, post_process=post_process, vp_stage=vp_stage)


@runtime_checkable
class OwnsConfig(Protocol):
    """A provider that builds from its own config (the adapters of provider objects above): MODEL_BUILT's
    settings check asks for `asked`, that config's fields when it was given, with `own_config`'s dtypes."""

    own_config: TransformerConfig | None
    asked: Requested | None


def _provides(obj: GivenProvider) -> TypeGuard[ProvidesModel]:
    return callable(getattr(obj, "provide", None)) and not inspect.isroutine(obj)


def _builds(obj: GivenProvider) -> TypeGuard[BuildsModel | ConfiguresModel]:
    """A ModelBuilder (`.build_model`) or a ModelConfig (`.get_builder_cls`), not a function or class."""
    if inspect.isroutine(obj) or inspect.isclass(obj):
        return False
    return callable(getattr(obj, "build_model", None)) or _configures(obj)


def _configures(obj: GivenProvider) -> TypeGuard[ConfiguresModel]:
    return callable(getattr(obj, "get_builder_cls", None))


def _object_provider(obj: GivenProvider, name: str) -> ModelProvider | None:
    """The adapter of a provider object (`.provide()`, a ModelBuilder, a ModelConfig); None otherwise."""
    if _provides(obj):
        return ProvideObject(obj, name=name)
    if _builds(obj):
        return BuilderObject(obj, name=name)
    return None


def adapt(fn: Callable[..., Module], name: str) -> ModelProvider:
    """`fn` callable in our shape, whichever of the shapes it has (found by signature): ours,
    Megatron-LM's `model_provider`, an object with `.provide()`, a ModelBuilder or a ModelConfig."""
    found = _object_provider(fn, name)
    if found is not None:
        return found
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or C callable: no signature to read, assume ours
        result: ModelProvider = fn
        return result
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    if "inputs" in params or (var_kw and "pre_process" not in params):
        result = fn
        return result
    if "pre_process" in params and "config" not in params:
        return MegatronLMProvider(fn, name=name, takes_vp_stage="vp_stage" in params or var_kw)
    if "config" in params and "pre_process" in params:
        return NoInputsProvider(fn, name=name)
    raise _fail(
        f"provider {name} has the signature {inspect.signature(fn)}, which fits no provider shape; write {SHAPES}", name
    )


def resolve_provider(provider: GivenProvider) -> ModelProvider:
    """A provider callable, a name or spec (`module:function`, `file.py:function`), None (gpt), or a
    `Provider` resolved before (its callable, not resolved again)."""
    if isinstance(provider, Provider):
        return provider.call
    if provider is None:
        return PROVIDERS["gpt"]
    if isinstance(provider, str):
        return adapt(load_provider(provider), provider)
    found = _object_provider(provider, name_of(provider))
    if found is not None:
        return found
    if not callable(provider):
        raise _fail(f"provider={provider!r} is not callable; pass {SHAPES} returning a MegatronModule", repr(provider))
    return adapt(provider, name_of(provider))


def display_name(provider: GivenProvider) -> str:
    """How errors name the provider the user gave: the spec string, or module:qualname."""
    if provider is None:
        return "gpt"
    return provider if isinstance(provider, str) else name_of(provider)


@dataclass(frozen=True, slots=True)
class Provider:
    """A model provider resolved once: `call` in our shape, and `name`, how errors name it (the spec
    the user wrote, or module:qualname). Callable as a `ModelProvider`."""

    call: ModelProvider
    name: str

    @classmethod
    def of(cls, given: GivenProvider) -> Provider:
        """`given` resolved (`resolve_provider`); a Provider is returned as it is."""
        if isinstance(given, Provider):
            return given
        return cls(call=resolve_provider(given), name=display_name(given))

    def __call__(
        self,
        config: TransformerConfig,
        *,
        pre_process: bool,
        post_process: bool,
        vp_stage: int | None,
        inputs: ModelInputs,
    ) -> Module:
        return self.call(config, pre_process=pre_process, post_process=post_process, vp_stage=vp_stage, inputs=inputs)


def reachable_config(module: Module) -> TransformerConfig | None:
    """The config megatron's `get_model_config` would find: `.config`, else through `.module`."""
    seen = 0
    while not hasattr(module, "config") and hasattr(module, "module") and seen < 32:
        module, seen = getattr(module, "module", None), seen + 1
    config: TransformerConfig | None = getattr(module, "config", None)
    return config


def check_chunk(returned: object, *, provider: str, chunk: int, stage: tuple[bool, bool, int | None]) -> Module:
    """`returned` when megatron can wrap it; else a ProviderError naming the provider, the chunk,
    what came back and the fix."""
    import torch

    pre, post, vp = stage
    where = f"provider {provider} returned for chunk {chunk} (pre_process={pre}, post_process={post}, vp_stage={vp})"
    kind = type(returned).__name__
    if isinstance(returned, (list, tuple, torch.nn.ModuleList)):
        raise _fail(
            f"{where} a {type(returned).__name__} of {len(returned)}; return one module per call: "
            "the lifecycle calls the provider once per virtual-pipeline chunk and makes the list",
            provider,
            chunk=chunk,
            returned=kind,
        )
    if not isinstance(returned, torch.nn.Module):
        raise _fail(
            f"{where} {_short(returned)}, not a torch.nn.Module; return a MegatronModule such "
            "as megatron.core.models.gpt.GPTModel",
            provider,
            chunk=chunk,
            returned=kind,
        )
    if reachable_config(returned) is None:
        children = ", ".join(f".{n}" for n, _ in returned.named_children()) or "none"
        raise _fail(
            f"{where} a {type(returned).__name__} with no .config, and no .module holding one "
            f"(its submodules: {children}); megatron's DDP and scheduler read the config through "
            "get_model_config, so keep the wrapped model as .module or set .config on the wrapper",
            provider,
            chunk=chunk,
            returned=kind,
        )
    return returned


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
