"""Tests that kill mutants (scripts/mutation)."""

from __future__ import annotations
