"""Config records, loading (YAML, presets, `--set`), validation and change detection.

Imports neither torch nor megatron (the environment probe imports torch when it runs).
"""

from __future__ import annotations

from lifecycle.config._bounds import BOUNDS
from lifecycle.config._checkpoints import LATEST as LATEST
from lifecycle.config._checkpoints import iteration_dir as iteration_dir
from lifecycle.config._checkpoints import latest_step as latest_step
from lifecycle.config._checkpoints import partial_dir as partial_dir
from lifecycle.config._environment import probe_environment
from lifecycle.config._normalize import normalize
from lifecycle.config._overrides import refuse_repeated as refuse_repeated
from lifecycle.config._problems import Environment, Problem
from lifecycle.config._records import DDPConfig as DDPConfig
from lifecycle.config._records import ModelConfig
from lifecycle.config._records import OptimizerConfig as OptimizerConfig
from lifecycle.config._records import ParallelConfig as ParallelConfig
from lifecycle.config._records import RunConfig as RunConfig
from lifecycle.config._records import TokenizerConfig as TokenizerConfig
from lifecycle.config._snapshot import CALLBACK_FIELDS, config_drift, require_unchanged, snapshot_config
from lifecycle.config._snapshot import Change as Change
from lifecycle.config._snapshot import Snapshot as Snapshot
from lifecycle.config._snapshot import flatten as flatten
from lifecycle.config._validation import raise_for as raise_for
from lifecycle.config._validation import validate

__all__ = [
    "BOUNDS",
    "CALLBACK_FIELDS",
    "Environment",
    "ModelConfig",
    "Problem",
    "config_drift",
    "normalize",
    "probe_environment",
    "require_unchanged",
    "snapshot_config",
    "validate",
]
