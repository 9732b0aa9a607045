"""The model provider's seam: what `Lifecycle(provider=)` takes, down to the entry work that calls it.

torchtitan's `TrainSpec` names its builders by type; here the shapes a user may give are Protocols,
so the engine (which imports neither torch nor megatron) and the entry work agree on them. The entry
work resolves the given provider into a `ModelProvider` (`lifecycle.core_entry.user_providers`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, TypeAlias, runtime_checkable

if TYPE_CHECKING:
    from megatron.core.transformer import TransformerConfig
    from torch.nn import Module


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelInputs:
    """What a provider needs beyond the TransformerConfig, resolved by the services."""

    vocab_size: int
    seq_length: int
    max_position_embeddings: int
    transformer_impl: Literal["local", "transformer_engine"] = "local"
    share_embeddings_and_output_weights: bool = True


class ModelProvider(Protocol):
    """Megatron's provider shape plus `inputs`; one call per virtual-pipeline chunk."""

    def __call__(
        self,
        config: TransformerConfig,
        *,
        pre_process: bool,
        post_process: bool,
        vp_stage: int | None,
        inputs: ModelInputs,
    ) -> Module: ...


class ProvidesModel(Protocol):
    """Megatron-Bridge's provider object: `.provide(pre_process=, post_process=[, vp_stage=])`
    builds one chunk from the object's own config."""

    @property
    def provide(self) -> Callable[..., Module]: ...


@runtime_checkable
class BuildsModel(Protocol):
    """Megatron-LM's `ModelBuilder`: `.build_model(pg_collection, pre_process=, post_process=,
    vp_stage=)` builds one chunk."""

    @property
    def build_model(self) -> Callable[..., Module]: ...


@runtime_checkable
class ConfiguresModel(Protocol):
    """Megatron-LM's `ModelConfig`: `.get_builder_cls()` is the `ModelBuilder` class made from it."""

    def get_builder_cls(self) -> Callable[..., BuildsModel]: ...


GivenProvider: TypeAlias = (
    ModelProvider | Callable[..., "Module"] | ProvidesModel | BuildsModel | ConfiguresModel | str | None
)
"""What `Lifecycle(provider=)` takes: a `ModelProvider`; Megatron-LM's `model_provider(pre_process,
post_process[, vp_stage])` or ours without `inputs` (both callables); one of the provider objects
above; a name or spec (`module:function`, `path/to/file.py:function`); None for the built-in gpt."""
