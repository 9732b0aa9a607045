"""Megatron-Bridge-shaped provider objects for `lifecycle check-binding --provider module:NAME`
(test_check_binding_cli.py): `KEEPING` builds on itself, `DROPPING` on a copy that lost its dropout.
Importing this module imports megatron (only the spawned ranks do)."""

from __future__ import annotations

from tests.integration.settings_cases import bridge_style

KEEPING = bridge_style()
DROPPING = bridge_style(drop=True)
