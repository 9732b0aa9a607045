"""MODEL_BUILT's `settings_checked` record read back: each setting that did not land is finding LA026,
naming the field, both values and the object; a clean comparison, or one whose mismatches
`settings.allow_mismatch` accepted, is none."""

from __future__ import annotations

from pathlib import Path

from audit_logs import engine_rank

from lifecycle.audit import audit
from lifecycle.log import records

DROPPED = {
    "section": "transformer",
    "field": "hidden_dropout",
    "kind": "not-landed",
    "requested": "0.0",
    "found": "0.1",
    "where": "chunk 0's config (not the provider's config: a copy or a new one)",
    "asked_as": "model.hidden_dropout",
}


def findings(log_dir: Path, mismatches: list[dict[str, str]], allowed: list[dict[str, str]]) -> list[str]:
    lc = engine_rank(log_dir, 0, 1)
    lc.advance_to(lc.target)
    lc.record(
        records.SettingsChecked(
            objects=["chunk 0's config"], compared=134, mismatches=mismatches, allowed=allowed, duration_s=0.001
        )
    )
    lc.shutdown()
    result = audit([str(log_dir / "rank-00000.jsonl")], jobs=1)
    return [f.message for f in result.findings if f.rule == "LA026"]


def test_a_setting_that_did_not_land_is_a_finding_naming_field_values_and_object(tmp_path: Path) -> None:
    [message] = findings(tmp_path, [DROPPED, {**DROPPED, "section": "ddp", "field": "bucket_size"}], [])
    assert message.startswith("2 settings did not reach the model that trains: hidden_dropout requested 0.0")
    assert "found 0.1 on chunk 0's config (not the provider's config" in message
    assert "ddp.bucket_size requested" in message


def test_a_refusal_by_megatrons_validation_names_the_object_and_the_error(tmp_path: Path) -> None:
    invalid = {**DROPPED, "field": "__post_init__", "kind": "invalid", "found": "ValueError: recompute_method"}
    [message] = findings(tmp_path, [invalid], [])
    assert "megatron's validation refuses chunk 0's config" in message
    assert "ValueError: recompute_method" in message


def test_a_clean_comparison_and_an_allowed_mismatch_are_no_finding(tmp_path: Path) -> None:
    assert findings(tmp_path, [], []) == []
    assert findings(tmp_path / "allowed", [], [DROPPED]) == []
