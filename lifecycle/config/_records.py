"""RunConfig: frozen records for everything a Megatron startup needs, loaded from YAML or dicts.

Unknown keys are rejected with the nearest valid name; `--set a.b=value` style overrides apply
before freezing (`_loading`). Validation (what the values mean together) is `_validation`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import orjson

from lifecycle.config import _loading
from lifecycle.config._overrides import apply_overrides, apply_values
from lifecycle.log import JSONValue


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelConfig:
    """The TransformerConfig fields a user sets, plus vocab and sequence settings."""

    num_layers: int = 2
    hidden_size: int = 64
    num_attention_heads: int = 4
    num_query_groups: int | None = None
    ffn_hidden_size: int | None = None
    seq_length: int = 32
    max_position_embeddings: int | None = None
    vocab_size: int | None = None
    make_vocab_size_divisible_by: int = 128
    dtype: Literal["fp32", "bf16", "fp16"] = "fp32"
    transformer_impl: Literal["local", "transformer_engine"] = "local"
    init_method_std: float = 0.02
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    num_moe_experts: int | None = None
    add_bias_linear: bool = True
    share_embeddings_and_output_weights: bool = True
    normalization: Literal["LayerNorm", "RMSNorm"] = "LayerNorm"
    recompute_granularity: Literal["full", "selective"] | None = None
    recompute_method: Literal["uniform", "block"] | None = None
    recompute_num_layers: int | None = None
    deterministic_mode: bool = False
    calculate_per_token_loss: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ParallelConfig:
    """Parallel dimensions. `world_size`/`rank` default to the launcher's environment."""

    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    vpp: int | None = None
    world_size: int | None = None
    rank: int | None = None
    sequence_parallel: bool = False
    tp_comm_overlap: bool = False

    def megatron_sizes(self) -> dict[str, int | None]:
        """The dims under the names megatron's initialize_model_parallel and TransformerConfig use."""
        return {
            "tensor_model_parallel_size": self.tp,
            "pipeline_model_parallel_size": self.pp,
            "virtual_pipeline_model_parallel_size": self.vpp,
            "context_parallel_size": self.cp,
            "expert_model_parallel_size": self.ep,
            "expert_tensor_parallel_size": self.etp,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class DDPConfig:
    """Megatron DistributedDataParallelConfig fields."""

    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    align_grad_reduce: bool = True
    align_param_gather: bool = True  # Megatron-LM's default (`--no-align-param-gather`)
    use_distributed_optimizer: bool = False
    grad_reduce_in_fp32: bool = False
    average_in_collective: bool = False
    bucket_size: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OptimizerConfig:
    """Megatron OptimizerConfig fields."""

    optimizer: Literal["adam", "sgd"] = "adam"
    lr: float = 1e-3
    min_lr: float = 0.0
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    clip_grad: float = 1.0
    loss_scale: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingConfig:
    """Batch and step settings."""

    micro_batch_size: int = 1
    num_microbatches: int = 1
    steps: int = 0
    seed: int = 1234


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenizerConfig:
    """`null`: megatron's synthetic tokenizer of `vocab_size`; `huggingface`: a local directory."""

    type: Literal["null", "huggingface"] = "null"
    path: str | None = None
    vocab_size: int = 1000
    build: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointConfig:
    """Where checkpoints come from and go; `vocab_size` is the one a checkpoint restored."""

    load: str | None = None
    save: str | None = None
    vocab_size: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LoggingConfig:
    """The startup log directory and the writers a run asks for."""

    log_dir: str | None = None
    tensorboard_dir: str | None = None
    timers: bool = False
    # a log_dir holding another run's logs: refuse it, overwrite them, or append to them
    existing: Literal["refuse", "overwrite", "append"] = "refuse"
    # spans written as the run goes (docs/observability.md): an OTLP JSON lines file, or an http(s)
    # OTLP endpoint when opentelemetry-exporter-otlp is installed; extra `otel`
    otel: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class InferenceConfig:
    """Inference settings whose modes need optional packages."""

    kv_cache_management_mode: Literal["persist", "offload", "recompute"] = "persist"
    static_kv_memory_pointers: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class StartupConfig:
    """Deadlines for the startup's collective parts (docs/failures.md)."""

    timeout_s: float = 600.0
    """Bounds the rendezvous and each collective state; passed to the TCPStore and process groups."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DistributedConfig:
    """How DISTRIBUTED creates megatron's process groups (docs/simulate.md#own-groups-only-distributedgroups)."""

    groups: Literal["own", "megatron"] = "own"
    """`own`: each rank creates only the groups it belongs to, O(group size); `megatron`: megatron's
    `initialize_model_parallel` as it is, every rank calling `new_group` for every group of the job."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SettingsConfig:
    """MODEL_BUILT's check that every setting asked for reached the model (docs/bindings.md)."""

    allow_mismatch: tuple[str, ...] = ()
    """Fields (`hidden_dropout`, `ddp.bucket_size`) whose mismatch is accepted knowingly: logged, not fatal."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunConfig:
    """Everything a lifecycle needs. Build with `from_dict`, `from_yaml` or `preset`."""

    model: ModelConfig = field(default_factory=ModelConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    ddp: DDPConfig = field(default_factory=DDPConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    inference: InferenceConfig = field(default_factory=InferenceConfig)
    startup: StartupConfig = field(default_factory=StartupConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    settings: SettingsConfig = field(default_factory=SettingsConfig)
    backend: Literal["gloo", "nccl", "fake"] = "gloo"
    plan: Literal["training", "inference", "convert", "rl"] = "training"
    rehearsal: bool | None = None

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, JSONValue],
        overrides: Iterable[str] = (),
        *,
        values: Mapping[str, JSONValue] | None = None,
    ) -> RunConfig:
        """Build from nested dicts; `overrides` are `"section.field=value"` strings, each value read
        by its field's type (`_overrides`: a string field takes the text as written); then `values`,
        dotted fields set to typed values as given (a CLI flag's value), never read as text."""
        data = apply_overrides(_loading.plain(data), overrides, cls)
        return _loading.build(cls, apply_values(data, values or {}))

    @classmethod
    def from_yaml(
        cls, path: str | Path, overrides: Iterable[str] = (), *, values: Mapping[str, JSONValue] | None = None
    ) -> RunConfig:
        """Read a YAML file of sections, then apply `overrides` and `values`."""
        return cls.from_dict(_loading.read_yaml(Path(path)), overrides, values=values)

    @classmethod
    def preset(
        cls, name: str, overrides: Iterable[str] = (), *, values: Mapping[str, JSONValue] | None = None
    ) -> RunConfig:
        """A YAML preset shipped in `lifecycle/presets/`."""
        return cls.from_yaml(_loading.preset_path(name), overrides, values=values)

    def to_dict(self) -> dict[str, JSONValue]:
        """Nested dicts of sections (dicts) and values."""
        return _loading.to_dict(self)

    def fingerprint(self) -> str:
        """SHA-256 of the canonical JSON form, without per-rank fields (`parallel.rank`), so every rank
        of one job has the same fingerprint and the audit can compare them."""
        data = self.to_dict()
        data["parallel"] = {k: v for k, v in _loading.to_dict(self.parallel).items() if k != "rank"}
        return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()
