"""Other projects' binding code, run as they wrote it, never re-implemented.

- Megatron-Bridge 0.3.1's `_update_model_config_funcs`: its source file
  `megatron/bridge/training/setup.py` is vendored verbatim in tests/fixtures (Apache-2.0, license
  beside it; its sha256 is the wheel's RECORD entry, checked before use). The function is compiled
  from that file's own text; the names it uses are megatron-core's, the provider types only appear
  in its annotations.
- Megatron-LM's `train()` binding block (after "Setup some training config params"): from the
  installed `megatron.training.training` when megatron-core >= 0.17 ships it, else the core_v0.16.1
  block vendored in tests/fixtures (license beside it).

Each binder has the `--binder mod:fn` shape: `binder(model, optimizer, ddp_config, provider_config)`.
"""

from __future__ import annotations

import ast
import base64
import hashlib
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BRIDGE_SETUP = FIXTURES / "megatron_bridge_0.3.1_training_setup.py.txt"
BRIDGE_RECORD_SHA256 = "nY5JZBugLYJxDqaRaLIm5dscKhi0kLbK6WWTcVo0ONk"
"""`megatron/bridge/training/setup.py` in megatron_bridge-0.3.1-py3-none-any.whl's RECORD."""
MEGATRON_LM_BLOCK = FIXTURES / "megatron_lm_core_v0.16.1_train_binding.py.txt"


def record_sha256(path: Path) -> str:
    """A file's hash as a wheel's RECORD writes it."""
    return base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()


def bridge_installer() -> Any:
    """Bridge 0.3.1's `_update_model_config_funcs`, compiled from the vendored file."""
    from functools import partial
    from typing import Optional

    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
        finalize_model_grads,
    )
    from megatron.core.distributed.fsdp.mcore_fsdp_adapter import FullyShardedDataParallel
    from megatron.core.optimizer import MegatronOptimizer
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer import MegatronModule

    if record_sha256(BRIDGE_SETUP) != BRIDGE_RECORD_SHA256:
        raise AssertionError(f"{BRIDGE_SETUP} is not the file Megatron-Bridge 0.3.1 ships")
    tree = ast.parse(BRIDGE_SETUP.read_text(), str(BRIDGE_SETUP))
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_update_model_config_funcs")
    namespace: dict[str, Any] = {
        "partial": partial,
        "Optional": Optional,
        "DistributedDataParallel": DistributedDataParallel,
        "DistributedDataParallelConfig": DistributedDataParallelConfig,
        "finalize_model_grads": finalize_model_grads,
        "megatron_FSDP": FullyShardedDataParallel,
        "MegatronOptimizer": MegatronOptimizer,
        "ProcessGroupCollection": ProcessGroupCollection,
        "MegatronModule": MegatronModule,
        # Bridge's provider classes, used only in the signature's annotations.
        "GPTModelProvider": object,
        "T5ModelProvider": object,
    }
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(BRIDGE_SETUP), "exec"), namespace)
    return namespace["_update_model_config_funcs"]


def bridge(model: list[Any], optimizer: Any, ddp_config: Any, provider_config: Any) -> None:
    """What Bridge's `setup()` does: its installer, given `cfg.model` (the provider's config)."""
    bridge_installer()(model, provider_config, ddp_config, optimizer, align_grad_reduce=True, pg_collection=None)


def megatron_core_version() -> tuple[int, int]:
    from importlib.metadata import version

    major, minor = version("megatron-core").split(".")[:2]
    return int(major), int(minor)


def megatron_lm(model: list[Any], optimizer: Any, ddp_config: Any, provider_config: Any = None) -> None:
    """Megatron-LM's `train()` binding block, run on `config = get_model_config(model[0])` with the
    arguments it reads taken from the DDP config (align_grad_reduce: its default, True)."""
    from lifecycle.cli.check_binding import megatron_lm_binding, run_train_block

    if megatron_core_version() >= (0, 17):
        megatron_lm_binding(model, optimizer, ddp_config, provider_config)
        return
    from megatron.core.distributed import DistributedDataParallel, finalize_model_grads
    from megatron.core.distributed.fsdp.mcore_fsdp_adapter import FullyShardedDataParallel

    namespace = {
        "DDP": DistributedDataParallel,
        "megatron_FSDP": FullyShardedDataParallel,
        "finalize_model_grads": finalize_model_grads,
    }
    lines = MEGATRON_LM_BLOCK.read_text().splitlines()
    run_train_block(lines, str(MEGATRON_LM_BLOCK), namespace, model, optimizer, ddp_config)
