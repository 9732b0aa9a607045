"""Replays of the public "a setting never reached the model" bugs, each a small CPU provider doing
what the bug did, run through a real lifecycle to MODEL_BUILT (test_settings_land.py).

Each replay names its tracker issue. The lifecycle asks for settings with `--set`; the provider then
loses them the way the bug did. A case returns what the lifecycle raised, the `settings_checked`
record, and the audit's LA026 finding.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import tempfile
from pathlib import Path
from typing import Any

from lifecycle import Lifecycle, LifecycleError, RunConfig
from lifecycle.audit import audit
from states import State

TINY = ["model.num_layers=2", "model.hidden_size=32", "model.num_attention_heads=4", "model.seq_length=16"]
RECOMPUTE = ["model.recompute_granularity=full", "model.recompute_method=uniform", "model.recompute_num_layers=1"]


def _gpt(config: Any, **kw: Any) -> Any:
    from lifecycle.core_entry.providers import gpt_provider

    return gpt_provider(config, **kw)


CPU_ONLY = (
    "gradient_accumulation_fusion",
    "bias_dropout_fusion",
    "masked_softmax_fusion",
    "apply_rope_fusion",
    "bias_activation_fusion",
    "persist_layer_norm",
)
"""The fusions a CPU model needs off (kept from the lifecycle's config: they are not what is replayed)."""


def _fresh(config: Any, **fields: Any) -> Any:
    """A TransformerConfig of the model's shape only, as a rebuilt provider makes it."""
    from megatron.core.transformer import TransformerConfig

    shape = ("num_layers", "hidden_size", "num_attention_heads", "use_cpu_initialization", *CPU_ONLY)
    return TransformerConfig(**{**{name: getattr(config, name) for name in shape}, **fields})


def nemotron_244(config: Any, **kw: Any) -> Any:
    """Nemotron #244: the HF-weights path rebuilt the provider and dropped every `model:` override."""
    return _gpt(_fresh(config), **kw)


def miles_1483(config: Any, **kw: Any) -> Any:
    """miles #1483: bridge mode did not carry the args-derived recompute and deterministic settings."""
    bridged = dataclasses.replace(
        config, recompute_granularity=None, recompute_method=None, recompute_num_layers=None, deterministic_mode=False
    )
    return _gpt(bridged, **kw)


class AReaL1603:
    """AReaL #1603: the deterministic settings went onto a provider object the model is not built from
    (the provider kept the config it was first made with)."""

    def __init__(self) -> None:
        self.kept: Any = None

    def __call__(self, config: Any, **kw: Any) -> Any:
        if self.kept is None:
            self.kept = copy.deepcopy(config)
            self.kept.deterministic_mode = False  # its own object, made before the settings arrived
        return _gpt(self.kept, **kw)


@dataclasses.dataclass
class _ModelSpec:
    transformer: Any


def nemo_rl_3494(config: Any, **kw: Any) -> Any:
    """NeMo-RL #3494: a `hasattr` guard on the wrong object turned the overrides into a no-op."""
    spec = _ModelSpec(transformer=_fresh(config))
    for name in ("hidden_dropout", "calculate_per_token_loss"):
        if hasattr(spec, name):  # the spec has no such field: nothing is set, nothing says so
            setattr(spec, name, getattr(config, name))
    return _gpt(spec.transformer, **kw)


def nemo_rl_2291(config: Any, **kw: Any) -> Any:
    """NeMo-RL #2291: a field set after `__post_init__` bypassed megatron-core's validation."""
    config.recompute_method = None  # full recompute without a method: __post_init__ refuses it
    return _gpt(config, **kw)


def bridge_627(config: Any, **kw: Any) -> Any:
    """Megatron-Bridge #627: the post-init checks (and derivations) ran before the overrides."""
    own = _fresh(config, hidden_size=16)  # validated, kv_channels derived from 16
    own.hidden_size = config.hidden_size  # the override, applied after __post_init__
    return _gpt(own, **kw)


def bridge_style(drop: bool = False) -> Any:
    """A Megatron-Bridge-shaped provider object: a TransformerConfig with `provide()`, which builds each
    chunk on itself, or (`drop`) on a copy that loses its dropout, as a provider that re-derives its
    config would."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.transformer import TransformerConfig

    from lifecycle.core_entry.providers import layer_spec

    @dataclasses.dataclass
    class BridgeStyleProvider(TransformerConfig):
        vocab_size: int = 256
        seq_length: int = 16

        def provide(self, pre_process: bool = True, post_process: bool = True, vp_stage: Any = None) -> Any:
            config = dataclasses.replace(self, hidden_dropout=0.0) if drop else self
            return GPTModel(
                config=config,
                transformer_layer_spec=layer_spec("local"),
                vocab_size=self.vocab_size,
                max_sequence_length=self.seq_length,
                pre_process=pre_process,
                post_process=post_process,
                vp_stage=vp_stage,
            )

    shape = {"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "use_cpu_initialization": True}
    return BridgeStyleProvider(**shape, **{name: False for name in CPU_ONLY}, hidden_dropout=0.2)


def has_model_builders() -> bool:
    """Whether Megatron-LM's ModelBuilder/ModelConfig are installed (megatron.training.models, megatron-core
    >= 0.17; its parent package is missing before)."""
    try:
        return importlib.util.find_spec("megatron.training.models") is not None
    except ModuleNotFoundError:
        return False


def megatron_model_config() -> Any:
    """Megatron-LM's `GPTModelConfig` (megatron.training, megatron-core >= 0.17): the tiny model on
    CPU, its own `transformer` asking for dropout 0.2."""
    from megatron.core.transformer import TransformerConfig
    from megatron.training.models.gpt import GPTModelConfig

    shape = {"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "use_cpu_initialization": True}
    transformer = TransformerConfig(
        **shape, **{name: False for name in CPU_ONLY}, hidden_dropout=0.2, transformer_impl="local"
    )
    return GPTModelConfig(transformer=transformer, vocab_size=256, seq_length=16)


def megatron_builder(drop: bool = False) -> Any:
    """Megatron-LM's `GPTModelBuilder` on `megatron_model_config()`, or (`drop`) one that builds each
    chunk from a copy of its config that lost the dropout, as a builder that re-derives its config."""
    from megatron.training.models.gpt import GPTModelBuilder

    class DroppingBuilder(GPTModelBuilder):
        def build_model(self, pg_collection: Any, *args: Any, **kwargs: Any) -> Any:
            mine = self._model_config
            rebuilt = dataclasses.replace(mine, transformer=dataclasses.replace(mine.transformer, hidden_dropout=0.0))
            return GPTModelBuilder(rebuilt).build_model(pg_collection, *args, **kwargs)

    return (DroppingBuilder if drop else GPTModelBuilder)(megatron_model_config())


def own_dropout(config: Any, **kw: Any) -> Any:
    """A provider that knowingly trains with its own dropout on a copy."""
    mine = copy.deepcopy(config)
    mine.hidden_dropout = 0.3
    return _gpt(mine, **kw)


def other_release(config: Any, **kw: Any) -> Any:
    """A model whose config is of another megatron-core release's class, one without `hidden_dropout`:
    the setting asked for has no field to land in (the layers keep the lifecycle's config)."""
    from megatron.core.transformer import TransformerConfig

    model = _gpt(config, **kw)
    kept = [f.name for f in dataclasses.fields(TransformerConfig) if f.name != "hidden_dropout"]
    older = dataclasses.make_dataclass(
        "TransformerConfig", [(name, Any, dataclasses.field(default=None)) for name in kept]
    )
    model.config = older(**{name: getattr(config, name) for name in kept})
    return model


REPLAYS: dict[str, tuple[Any, list[str]]] = {
    "nemotron_244": (nemotron_244, ["model.calculate_per_token_loss=true", *RECOMPUTE]),
    "miles_1483": (miles_1483, ["model.deterministic_mode=true", *RECOMPUTE]),
    "areal_1603": (AReaL1603, ["model.deterministic_mode=true"]),
    "nemo_rl_3494": (nemo_rl_3494, ["model.hidden_dropout=0.2", "model.calculate_per_token_loss=true"]),
    "nemo_rl_2291": (nemo_rl_2291, RECOMPUTE),
    "bridge_627": (bridge_627, []),
}
"""Replay → (provider, the settings asked for)."""


def _records(log_dir: str, event: str) -> list[dict[str, Any]]:
    import orjson

    lines = Path(log_dir, "rank-00000.jsonl").read_bytes().splitlines()
    return [r for r in map(orjson.loads, lines) if r.get("event") == event]


def _run(provider: Any, overrides: list[str]) -> dict[str, Any]:
    log_dir = tempfile.mkdtemp(prefix="settings-")
    error: LifecycleError | None = None
    try:
        with Lifecycle(RunConfig.preset("tiny-gpt", [*TINY, *overrides]), provider, log_dir) as lc:
            lc.advance_to(State.MODEL_BUILT)
    except LifecycleError as exc:
        error = exc
    cause = error.__cause__ if error is not None and error.__cause__ is not None else error
    records = _records(log_dir, "settings_checked")
    record = records[0] if records else None
    findings = audit([str(Path(log_dir, "rank-00000.jsonl"))], jobs=1).findings
    return {
        "error": None if cause is None else type(cause).__name__,
        "message": None if cause is None else str(cause),
        "fields": getattr(cause, "fields", None),
        "record": record,
        "la026": [f.message for f in findings if f.rule == "LA026"],
    }


def callbacks_6067() -> dict[str, Any]:
    """Megatron-Bridge #6067 / NeMo-RL #3789: Bridge's own binder (0.3.1, vendored) on a copying provider:
    the settings check passes (the callbacks are bound later), `bindings.check` names the finalizer."""
    import bindings
    from lifecycle.core_entry.providers import copying_provider
    from tests.integration import foreign_binders

    with Lifecycle(RunConfig.preset("tiny-gpt", TINY), copying_provider, tempfile.mkdtemp()) as lc:
        lc.advance_to(State.MODEL_BUILT)
        rt = lc.runtime
        foreign_binders.bridge(list(rt.model), rt.optimizer, rt.ddp_config, rt.provider_config)
        report = bindings.check(list(rt.model), rt.ddp_config, rt.optimizer, provider_config=rt.provider_config)
        bad = [s.slot for s in report.bad]
        for slot in bindings.SLOTS:  # leave the provider's config as the lifecycle would
            setattr(rt.provider_config, slot, None)
    return {"verdict": report.verdict, "bad": bad}


SHIPPED = ("gpt", "copying", "gpt-builder", "hybrid-builder")
SETTINGS = {
    "defaults": [],
    "recompute+deterministic+per-token+rmsnorm": [
        *RECOMPUTE,
        "model.deterministic_mode=true",
        "model.calculate_per_token_loss=true",
        "model.normalization=RMSNorm",
        "model.hidden_dropout=0.1",
    ],
    "overlap+distributed-optimizer": [
        "ddp.overlap_grad_reduce=true",
        "ddp.use_distributed_optimizer=true",
        "ddp.overlap_param_gather=true",
    ],
}


def _shipped(name: str) -> Any:
    from lifecycle.core_entry.providers import PROVIDERS, GPTBuilder, HybridBuilder

    return {"gpt-builder": GPTBuilder, "hybrid-builder": HybridBuilder}.get(name, lambda: PROVIDERS[name])()


def run_all() -> dict[str, Any]:
    out: dict[str, Any] = {
        name: _run(make() if isinstance(make, type) else make, o) for name, (make, o) in REPLAYS.items()
    }
    out["callbacks_6067"] = callbacks_6067()
    out["shipped"] = {
        (provider, label): _run(_shipped(provider), overrides)
        for provider in SHIPPED
        for label, overrides in SETTINGS.items()
    }
    out["allowed"] = _run(own_dropout, ["settings.allow_mismatch=[hidden_dropout]"])
    out["other_release"] = _run(other_release, ["model.hidden_dropout=0.2"])
    out["bridge_style"] = _run(bridge_style(), [])
    out["bridge_style_dropping"] = _run(bridge_style(drop=True), [])
    if has_model_builders():
        out["model_config"] = _run(megatron_model_config(), [])
        out["model_builder"] = _run(megatron_builder(), [])
        out["model_builder_dropping"] = _run(megatron_builder(drop=True), [])
    return out
