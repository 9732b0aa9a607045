"""MODEL_BUILT's last check: every setting the validated config asks for reached the model that trains.

`bindings.check_settings` compares what was asked (`model_built.asked_for`: the megatron configs
built again from the frozen RunConfig) with each chunk's `get_model_config`, each DDP wrapper's
config and the optimizer's, and re-runs each one's `__post_init__`. The comparison is logged
(`settings_checked`, audit rule LA026); a mismatch that `settings.allow_mismatch` does not name fails
the transition with one line per field (`SettingsNotLanded`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

import bindings
from lifecycle.config import DDPConfig, ModelConfig, OptimizerConfig
from lifecycle.errors import ConfigError
from lifecycle.log import records

if TYPE_CHECKING:
    from megatron.core.optimizer import MegatronOptimizer
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.module import MegatronModule

    from lifecycle.runtime import PhaseContext

_PARALLEL: Final = {
    "tensor_model_parallel_size": "parallel.tp",
    "pipeline_model_parallel_size": "parallel.pp",
    "virtual_pipeline_model_parallel_size": "parallel.vpp",
    "context_parallel_size": "parallel.cp",
    "expert_model_parallel_size": "parallel.ep",
    "expert_tensor_parallel_size": "parallel.etp",
    "sequence_parallel": "parallel.sequence_parallel",
    "tp_comm_overlap": "parallel.tp_comm_overlap",
}
_DTYPE: Final = ("params_dtype", "pipeline_dtype", "bf16", "fp16")

ASKED_AS: Final = MappingProxyType(
    {
        **{f"transformer.{name}": asked for name, asked in _PARALLEL.items()},
        **{f"transformer.{name}": "model.dtype" for name in _DTYPE},
        **{f"optimizer.{name}": "model.dtype" for name in _DTYPE if name != "pipeline_dtype"},
        "optimizer.use_distributed_optimizer": "ddp.use_distributed_optimizer",
    }
)
"""The RunConfig field a megatron field comes from, where the names differ (`with_names`)."""


def with_names(requested: bindings.Requested) -> bindings.Requested:
    """`requested` with `asked_as` filled: for each compared field the RunConfig field it comes
    from (`transformer.hidden_dropout` → `model.hidden_dropout`), where there is one."""
    own = {
        "transformer": ("model", {f.name for f in dataclasses.fields(ModelConfig)}),
        "ddp": ("ddp", {f.name for f in dataclasses.fields(DDPConfig)}),
        "optimizer": ("optimizer", {f.name for f in dataclasses.fields(OptimizerConfig)}),
    }
    names = {}
    for section, fields in requested.sections():
        prefix, known = own[section]
        for name in fields:
            key = f"{section}.{name}"
            if key in ASKED_AS or name in known:
                names[key] = ASKED_AS.get(key, f"{prefix}.{name}")
    return dataclasses.replace(requested, asked_as=MappingProxyType(names))


def check_landed(
    ctx: PhaseContext,
    model: Sequence[MegatronModule],
    optimizer: MegatronOptimizer | None,
    provider_config: TransformerConfig | None,
    requested: bindings.Requested,
) -> bindings.SettingsReport:
    """Compare, log `settings_checked`, and raise `SettingsNotLanded` for what did not land."""
    allow = ctx.runtime.config.settings.allow_mismatch
    start = time.perf_counter()
    report = bindings.check_settings(
        model, requested, optimizer=optimizer, provider_config=provider_config, allow=allow
    )
    if report.unknown_allowed:
        names = ", ".join(report.unknown_allowed)
        raise ConfigError(
            f"settings.allow_mismatch names {names}, which no compared config has; name a TransformerConfig "
            "field (hidden_dropout) or a section's (ddp.bucket_size, optimizer.lr), or remove it",
            field="settings.allow_mismatch",
            problems=list(report.unknown_allowed),
        )
    ctx.emit(records.SettingsChecked(**report.log_fields(), duration_s=round(time.perf_counter() - start, 6)))
    report.raise_if_bad()
    return report
