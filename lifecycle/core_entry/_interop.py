"""A checkpoint of one model class loaded into the other: GPTModel → HybridModel, and the refusal back.

The shipped providers build GPTModel before megatron-core 0.19 and HybridModel (each GPT block `*-`)
from it (`compat.gpt_model_deprecated`), so a run that upgrades megatron-core resumes from a GPTModel
checkpoint. Which model saved a checkpoint is read from its storage keys (torch's `.metadata`, no
tensor read): GPTModel's decoder stores its layers homogeneously (`decoder.layers.self_attention...`,
the layer a sharding axis) and its final norm as `decoder.final_layernorm`; HybridModel names each
layer (`decoder.layers.<i>.`) and its final norm `decoder.final_norm`.

GPTModel → HybridModel: megatron-core's own translator (`dist_checkpointing.gpt_checkpoint_interop`,
`compat.gpt_checkpoint_interop`) rewrites the HybridModel's sharded state dict, model and optimizer,
onto the GPT keys before the load; nothing on disk changes. HybridModel → GPTModel has no
translator: refused with the fix.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from lifecycle.errors import ConfigError

if TYPE_CHECKING:
    from megatron.core.dist_checkpointing.mapping import ShardedStateDict
    from megatron.core.transformer.module import MegatronModule

GPT, HYBRID = "GPTModel", "HybridModel"
_GPT_KEY = re.compile(r"(^|\.)decoder\.(layers\.(?!\d)|final_layernorm\.)")
_HYBRID_KEY = re.compile(r"(^|\.)decoder\.final_norm\.")


def saved_by(path: Path) -> str | None:
    """GPT or HYBRID, from the checkpoint's storage keys; None when its keys name neither (no
    decoder on these keys, or a checkpoint that is not torch's, whose load reports its own error)."""
    from torch.distributed.checkpoint import FileSystemReader

    try:
        keys = list(FileSystemReader(str(path)).read_metadata().state_dict_metadata)
    except Exception:  # a damaged `.metadata` is named by the load that follows
        return None
    if any(_HYBRID_KEY.search(key) for key in keys):
        return HYBRID
    if any(_GPT_KEY.search(key) for key in keys):
        return GPT
    return None


def _built(model: list[MegatronModule]) -> str:
    from megatron.core.utils import unwrap_model

    return type(unwrap_model(list(model))[0]).__name__


def retarget(path: Path, field: str, model: list[MegatronModule], state: ShardedStateDict) -> str | None:
    """Point `state` (the sharded state dict of `model` and its optimizer) at the checkpoint under
    `path` when another model class saved it; the class it was saved by when so, else None. A
    HybridModel checkpoint for a GPTModel is a ConfigError naming both and the fix."""
    saved, built = saved_by(path), _built(model)
    if saved is None or saved == built or built not in (GPT, HYBRID):
        return None
    if saved == HYBRID:
        raise ConfigError(
            f"{field}={str(path.parent)!r}: {path.name} was saved by a {HYBRID} (megatron-core 0.19's "
            f"shipped providers) and this run builds a {GPT}, which cannot load it; resume it with "
            f"megatron-core >= 0.19 and a shipped provider, or point {field} at a {GPT} checkpoint",
            field=field,
            problems=[str(path)],
        )
    _translate(path, field, model, state)
    return GPT


def _translate(path: Path, field: str, model: list[MegatronModule], state: ShardedStateDict) -> None:
    """Rewrite the HybridModel's `state` onto the GPTModel keys of the checkpoint at `path`."""
    from lifecycle.core_entry.compat import gpt_checkpoint_interop

    interop = gpt_checkpoint_interop()
    if interop is None:
        raise ConfigError(
            f"{field}={str(path.parent)!r}: {path.name} was saved by a {GPT} and this run builds a "
            f"{HYBRID}; megatron-core before 0.19 has no translator between them: upgrade megatron-core "
            f"to >= 0.19, or build a {GPT} (a shipped provider on this release)",
            field=field,
            problems=[str(path)],
        )
    from megatron.core.utils import unwrap_model

    try:
        maps = interop.gpt_compatible_layer_maps(unwrap_model(list(model))[0].hybrid_layer_pattern)
        interop.retarget_sharded_state_dict_to_gpt_checkpoint(state, maps)
    except ValueError as exc:  # a pattern megatron cannot pair with GPT layers: its reason
        raise ConfigError(
            f"{field}={str(path.parent)!r}: {path.name} was saved by a {GPT} and cannot be translated for "
            f"this {HYBRID}: {str(exc).splitlines()[0]}",
            field=field,
            problems=[str(path)],
        ) from exc
