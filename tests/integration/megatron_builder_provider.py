"""Megatron-LM's model objects for `lifecycle check-binding --provider module:NAME`
(test_check_binding_cli.py): `CONFIG`, a `GPTModelConfig`; `DROPPING`, a `GPTModelBuilder` that builds
from a copy of its config without the dropout. Importing this module imports megatron.training
(megatron-core >= 0.17; only the spawned ranks do)."""

from __future__ import annotations

from tests.integration.settings_cases import megatron_builder, megatron_model_config

CONFIG = megatron_model_config()
DROPPING = megatron_builder(drop=True)
