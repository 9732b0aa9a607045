"""Config records, loading (YAML, presets, `--set`), validation and change detection.

Imports neither torch nor megatron (the environment probe imports torch when it runs).
"""

from __future__ import annotations

from lifecycle.config._bounds import BOUNDS, LOCAL_PATHS
from lifecycle.config._checkpoints import LATEST, checkpoint_problem, iteration_dir, latest_step, partial_dir
from lifecycle.config._environment import probe_environment
from lifecycle.config._loading import preset_names
from lifecycle.config._normalize import Normalization, normalize
from lifecycle.config._overrides import refuse_repeated
from lifecycle.config._problems import TE_EXTRA, Environment, Kind, Problem
from lifecycle.config._records import (
    CheckpointConfig,
    DDPConfig,
    InferenceConfig,
    LoggingConfig,
    ModelConfig,
    OptimizerConfig,
    ParallelConfig,
    RunConfig,
    SettingsConfig,
    StartupConfig,
    TokenizerConfig,
    TrainingConfig,
)
from lifecycle.config._snapshot import (
    CALLBACK_FIELDS,
    Snapshot,
    config_drift,
    diff,
    flatten,
    require_unchanged,
    snapshot_config,
)
from lifecycle.config._validation import check_names, raise_for, validate

__all__ = [
    "BOUNDS",
    "CALLBACK_FIELDS",
    "LATEST",
    "LOCAL_PATHS",
    "TE_EXTRA",
    "CheckpointConfig",
    "DDPConfig",
    "Environment",
    "InferenceConfig",
    "Kind",
    "LoggingConfig",
    "ModelConfig",
    "Normalization",
    "OptimizerConfig",
    "ParallelConfig",
    "Problem",
    "RunConfig",
    "SettingsConfig",
    "Snapshot",
    "StartupConfig",
    "TokenizerConfig",
    "TrainingConfig",
    "check_names",
    "checkpoint_problem",
    "config_drift",
    "diff",
    "flatten",
    "iteration_dir",
    "latest_step",
    "normalize",
    "partial_dir",
    "preset_names",
    "probe_environment",
    "raise_for",
    "refuse_repeated",
    "require_unchanged",
    "snapshot_config",
    "validate",
]
