"""RunConfig: frozen records for everything a Megatron startup needs, loaded from YAML or dicts.

Unknown keys are rejected with the nearest valid name; `--set a.b=value` style overrides apply
before freezing. Validation (what the values mean together) lives in the VALIDATE phase.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from lifecycle._errors import ConfigError

_frozen = dataclass(frozen=True, slots=True, kw_only=True)


@_frozen
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


@_frozen
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


@_frozen
class DDPConfig:
    """Megatron DistributedDataParallelConfig fields."""

    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    align_grad_reduce: bool = True
    align_param_gather: bool = False
    use_distributed_optimizer: bool = False
    grad_reduce_in_fp32: bool = False
    average_in_collective: bool = False
    bucket_size: int | None = None


@_frozen
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


@_frozen
class TrainingConfig:
    """Batch and step settings."""

    micro_batch_size: int = 1
    num_microbatches: int = 1
    steps: int = 0
    seed: int = 1234


@_frozen
class TokenizerConfig:
    """`null`: megatron's synthetic tokenizer of `vocab_size`; `huggingface`: a local directory."""

    type: Literal["null", "huggingface"] = "null"
    path: str | None = None
    vocab_size: int = 1000
    build: bool = True


@_frozen
class CheckpointConfig:
    """Where checkpoints come from and go; `vocab_size` is the one a checkpoint restored."""

    load: str | None = None
    save: str | None = None
    vocab_size: int | None = None


@_frozen
class LoggingConfig:
    """The startup log directory and the writers a run asks for."""

    log_dir: str | None = None
    tensorboard_dir: str | None = None
    timers: bool = False


@_frozen
class InferenceConfig:
    """Inference settings whose modes need optional packages."""

    kv_cache_management_mode: Literal["persist", "offload", "recompute"] = "persist"
    static_kv_memory_pointers: bool = False


@_frozen
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
    backend: Literal["gloo", "nccl", "fake"] = "gloo"
    plan: Literal["training", "inference", "convert", "rl"] = "training"
    rehearsal: bool | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], overrides: Iterable[str] = ()) -> RunConfig:
        """Build from nested dicts; `overrides` are `"section.field=value"` strings (YAML values)."""
        merged = _apply_overrides(_plain(data), overrides)
        config: RunConfig = _build(cls, merged, "")
        return config

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: Iterable[str] = ()) -> RunConfig:
        import yaml

        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(
                f"cannot read config file {str(path)!r}: {exc.strerror}; pass an existing YAML file",
                field="path", problems=[str(exc)],
            ) from exc
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}", field="path", problems=[str(exc)]) from exc
        if not isinstance(data, Mapping):
            raise ConfigError(f"{path}: the top level must be a mapping of sections", field="path", problems=[])
        return cls.from_dict(data, overrides)

    @classmethod
    def preset(cls, name: str, overrides: Iterable[str] = ()) -> RunConfig:
        """A YAML preset shipped in `lifecycle/presets/`."""
        path = Path(__file__).parent / "presets" / f"{name}.yaml"
        if not path.is_file():
            known = preset_names()
            hint = difflib.get_close_matches(name, known, n=1)
            near = f"; did you mean {hint[0]!r}?" if hint else ""
            raise ConfigError(
                f"unknown preset {name!r}{near} Known presets: {', '.join(known)}",
                field="preset", problems=[name],
            )
        return cls.from_yaml(path, overrides)

    def to_dict(self) -> dict[str, Any]:
        return _to_dict(self)

    def fingerprint(self) -> str:
        """SHA-256 of the canonical JSON form, without per-rank fields (`parallel.rank`), so every rank
        of one job has the same fingerprint and the audit can compare them."""
        data = self.to_dict()
        data["parallel"].pop("rank", None)
        return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()


def preset_names() -> list[str]:
    return sorted(p.stem for p in (Path(__file__).parent / "presets").glob("*.yaml"))


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"a": {"b": 1}}` → `{"a.b": 1}`."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(field, old, new) for every dotted field that differs."""
    a, b = flatten(old), flatten(new)
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


class Snapshot:
    """The field values of a config at one moment; `changes()` names what differs now (fast: one
    attrgetter per section, so the engine can check before every transition)."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.sections = tuple(
            (f.name, getattr(config, f.name), _getter(getattr(config, f.name)))
            for f in dataclasses.fields(typing.cast(Any, config))
            if dataclasses.is_dataclass(getattr(config, f.name))
        )
        self.values = tuple(get(section) for _, section, get in self.sections)
        self.top_getter = _getter(config)
        self.top = self.top_getter(config)
        self.flat = flatten(config.to_dict())

    def changes(self) -> list[tuple[str, Any, Any]]:
        same = self.top_getter(self.config) == self.top and all(
            get(section) == values for (_, section, get), values in zip(self.sections, self.values, strict=True)
        )
        return [] if same else diff(_unflatten(self.flat), self.config.to_dict())


def _getter(obj: Any) -> Any:
    import operator

    names = [f.name for f in dataclasses.fields(obj)]
    get = operator.attrgetter(*names)
    return (lambda o: (get(o),)) if len(names) == 1 else get


def _unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def _to_dict(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        out[f.name] = _to_dict(value) if dataclasses.is_dataclass(value) else value
    return out


def _plain(data: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k): (_plain(v) if isinstance(v, Mapping) else v) for k, v in data.items()}


def _apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    import yaml

    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                f"override {item!r} is not KEY=VALUE; write e.g. --set parallel.tp=2",
                field=item, problems=[item],
            )
        node = data
        parts = key.strip().split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {part!r} is not a section", field=key, problems=[item])
            node = child
        node[parts[-1]] = yaml.safe_load(raw) if raw.strip() else None
    return data


def _build(cls: type[Any], data: Mapping[str, Any], where: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    problems: list[str] = []
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{where}{key}"
        if key not in names:
            near = difflib.get_close_matches(key, names, n=1, cutoff=0.5)
            hint = f"did you mean {(where + near[0])!r}?" if near else f"valid keys: {', '.join(names)}"
            problems.append(f"unknown key {path!r}: {hint}")
            continue
        hint = hints[key]
        if dataclasses.is_dataclass(hint) and isinstance(hint, type):
            if not isinstance(value, Mapping):
                problems.append(f"{path} must be a mapping of {hint.__name__} fields, got {value!r}")
                continue
            try:
                kwargs[key] = _build(hint, value, path + ".")
            except ConfigError as exc:
                problems.extend(exc.problems)
            continue
        error = _type_problem(hint, value)
        if error:
            problems.append(f"{path}: {error}")
        else:
            is_int = isinstance(value, int) and not isinstance(value, bool)
            kwargs[key] = float(value) if _is_float(hint) and is_int else value
    if problems:
        raise ConfigError(
            "invalid config:\n  - " + "\n  - ".join(problems), field=where.rstrip(".") or None, problems=problems
        )
    return cls(**kwargs)


def _is_float(hint: Any) -> bool:
    return hint is float or float in typing.get_args(hint)


def _type_problem(hint: Any, value: Any) -> str | None:
    origin = typing.get_origin(hint)
    if origin is Literal:
        choices = typing.get_args(hint)
        return None if value in choices else f"got {value!r}; choose one of {', '.join(map(repr, choices))}"
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        errors = [_type_problem(o, value) for o in options if o is not type(None)]
        return None if any(e is None for e in errors) else errors[0]
    if hint is bool:
        return None if isinstance(value, bool) else f"expected true or false, got {value!r}"
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return None if ok else f"expected an integer, got {value!r}"
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return None if ok else f"expected a number, got {value!r}"
    if hint is str:
        return None if isinstance(value, str) else f"expected a string, got {value!r}"
    if hint is type(None):
        return None if value is None else f"expected null, got {value!r}"
    return None
