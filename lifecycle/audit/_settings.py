"""LA026 `setting-not-landed`: the `settings_checked` record MODEL_BUILT writes
(`lifecycle.core_entry.settings`), read back: each setting asked for that the model does not carry."""

from __future__ import annotations

from lifecycle.audit._reads import SettingsChecked
from lifecycle.audit._rules import RuleId
from lifecycle.audit._state import RankState

_SHOWN = 4  # fields named in the finding; the rest are counted


def _describe(entry: dict[str, str]) -> str:
    name = entry.get("field", "?")[:60]
    section = entry.get("section")
    if section not in (None, "transformer"):
        name = f"{str(section)[:20]}.{name}"
    if entry.get("kind") == "invalid":
        return (
            f"{name}: megatron's validation refuses {str(entry.get('where', ''))[:80]}: {str(entry.get('found'))[:120]}"
        )
    return (
        f"{name} requested {str(entry.get('requested'))[:60]}, found {str(entry.get('found'))[:60]} "
        f"on {str(entry.get('where', ''))[:80]}"
    )


def settings_checked(audit: RankState, rec: SettingsChecked, ts: float) -> None:
    mismatches = rec.mismatches
    if not mismatches:
        return
    shown = "; ".join(_describe(m) for m in mismatches[:_SHOWN])
    more = f"; and {len(mismatches) - _SHOWN} more" if len(mismatches) > _SHOWN else ""
    audit.flag(
        RuleId.SETTING_NOT_LANDED,
        f"{len(mismatches)} setting{'s' if len(mismatches) != 1 else ''} did not reach the model that trains: "
        f"{shown}{more}; set them on the config the provider is given, before megatron validates it, or accept "
        "one knowingly with settings.allow_mismatch",
    )
