"""What megatron legitimately changes between the settings asked for and the objects it runs with.

A field listed here is not a mismatch when its found value is what megatron derives, for the reason
given. Everything else that differs is (`_settings.compare`). The table is the one place this list
lives; docs/bindings.md prints it, and tests/unit/test_settings.py checks each entry both ways (the
derived value passes, any other value is still caught).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True, kw_only=True)
class Derivation:
    """`section.field` may be found as `accepts(requested, found, fields)` allows, because `reason`."""

    section: str
    field: str
    reason: str
    accepts: Callable[[object, object, Mapping[str, object]], bool]


def _bucket_size(requested: object, found: object, fields: Mapping[str, object]) -> bool:
    # megatron's DistributedDataParallel: no bucketing without overlap (bucket_size None), else
    # a default of max(40,000,000, 1,000,000 x data-parallel size) when none was asked for
    if not fields.get("overlap_grad_reduce"):
        return found is None or found == requested
    return requested is None and isinstance(found, int) and found >= 40_000_000


def _attached(requested: object, found: object, fields: Mapping[str, object]) -> bool:
    return requested is None


DERIVATIONS: Final[tuple[Derivation, ...]] = (
    Derivation(
        section="ddp",
        field="bucket_size",
        reason="megatron's DistributedDataParallel sets it: None (one bucket) without "
        "overlap_grad_reduce, else max(40M, 1M x data-parallel size) parameters when none was asked",
        accepts=_bucket_size,
    ),
    Derivation(
        section="optimizer",
        field="timers",
        reason="Megatron-LM's setup_model_and_optimizer attaches its global timers to the optimizer's config "
        "(a runtime handle, not a setting) where none was given",
        accepts=_attached,
    ),
)
"""Every legitimate derivation, by section and field."""

_BY_FIELD: Final[dict[tuple[str, str], Derivation]] = {(d.section, d.field): d for d in DERIVATIONS}


def derived(section: str, field: str, requested: object, found: object, fields: Mapping[str, object]) -> bool:
    """Whether `found` is what megatron legitimately derives for `section.field` from `requested`
    (`fields`: the found object's fields)."""
    rule = _BY_FIELD.get((section, field))
    return rule is not None and rule.accepts(requested, found, fields)
