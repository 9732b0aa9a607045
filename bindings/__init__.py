"""The only code that writes Megatron's scheduler callbacks."""

from __future__ import annotations

__all__: list[str] = []
