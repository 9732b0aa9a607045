"""Every setting lands: MODEL_BUILT compares what the validated config asks for with what
the model that trains carries, on real megatron-core (one CPU rank, one spawned process).

- Seven public bugs replayed as small providers (settings_cases.py): six lose a setting on the way
  to the model and fail MODEL_BUILT naming the field, the `settings_checked` record keeps it, and
  the audit reports LA026; the seventh (callbacks on the provider's copy) passes the settings check
  and `bindings.check` names the finalizer.
- Every shipped provider (gpt, copying, gpt-builder, hybrid-builder) with each group of settings
  (defaults; recompute, deterministic mode, per-token loss, RMSNorm, dropout; the overlapped,
  distributed optimizer) reaches MODEL_BUILT with nothing reported.
- `settings.allow_mismatch` accepts a named field knowingly: MODEL_BUILT passes, the record keeps it.
- A model whose config class has no field for a setting asked for (another release's class) fails
  MODEL_BUILT: the setting did not land, "no such field".
- A Megatron-Bridge-shaped provider object (a TransformerConfig with `provide()`) is compared with its
  own fields: clean when it builds on itself, caught when it builds on a copy that lost one. So are
  Megatron-LM's `ModelConfig` and `ModelBuilder` (megatron-core >= 0.17), compared with the model
  config's own `transformer`.
"""

from __future__ import annotations

from typing import Any

import pytest

from lifecycle.launchers.local import run_ranks
from tests.integration import settings_cases

pytestmark = pytest.mark.slow

CAUGHT = {
    "nemotron_244": {"calculate_per_token_loss", "recompute_granularity", "recompute_method", "recompute_num_layers"},
    "miles_1483": {"deterministic_mode", "recompute_granularity", "recompute_method", "recompute_num_layers"},
    "areal_1603": {"deterministic_mode"},
    "nemo_rl_3494": {"hidden_dropout", "calculate_per_token_loss"},
    "nemo_rl_2291": {"recompute_method", "__post_init__"},
    "bridge_627": {"kv_channels"},
}
"""Replay → the fields its report must name (more may follow from the same loss)."""


@pytest.fixture(scope="module")
def cases() -> dict[str, Any]:
    [out] = run_ranks(settings_cases.run_all, 1, timeout_s=900)
    return out


@pytest.mark.parametrize("replay", sorted(CAUGHT))
def test_each_replayed_bug_fails_model_built_naming_the_field_in_the_error_the_record_and_the_audit(
    cases: dict[str, Any], replay: str
) -> None:
    case = cases[replay]
    assert case["error"] == "SettingsNotLanded", case["message"]
    assert CAUGHT[replay] <= set(case["fields"]), case["message"]
    recorded = {m["field"] for m in case["record"]["mismatches"]}
    assert CAUGHT[replay] <= recorded
    [finding] = case["la026"]
    named = sorted(CAUGHT[replay] - {"__post_init__"})[0]
    assert named in finding


def test_a_field_set_after_validation_is_also_reported_as_megatrons_own_refusal(cases: dict[str, Any]) -> None:
    case = cases["nemo_rl_2291"]
    [invalid] = [m for m in case["record"]["mismatches"] if m["kind"] == "invalid"]
    assert "recompute_method" in invalid["found"] and invalid["where"].startswith("chunk 0's config")


def test_a_dropped_override_names_the_setting_the_user_wrote_and_both_values(cases: dict[str, Any]) -> None:
    [dropout] = [m for m in cases["nemo_rl_3494"]["record"]["mismatches"] if m["field"] == "hidden_dropout"]
    assert (dropout["asked_as"], dropout["requested"], dropout["found"]) == ("model.hidden_dropout", "0.2", "0.1")
    assert dropout["where"] == "chunk 0's config (not the provider's config: a copy or a new one)"
    assert "hidden_dropout (model.hidden_dropout): requested 0.2, found 0.1" in cases["nemo_rl_3494"]["message"]


def test_callbacks_on_the_providers_copy_are_named_by_the_binding_check(cases: dict[str, Any]) -> None:
    case = cases["callbacks_6067"]
    assert case["verdict"] == "missing" and "finalize_model_grads_func" in case["bad"]


@pytest.mark.parametrize(
    "key",
    [(p, s) for p in settings_cases.SHIPPED for s in settings_cases.SETTINGS],
    ids=[f"{p}-{s}" for p in settings_cases.SHIPPED for s in settings_cases.SETTINGS],
)
def test_every_shipped_provider_carries_every_setting_asked_for(cases: dict[str, Any], key: tuple[str, str]) -> None:
    case = cases["shipped"][key]
    assert case["error"] is None, case["message"]
    record = case["record"]
    assert record["mismatches"] == [] and record["allowed"] == [] and case["la026"] == []
    assert record["compared"] > 100 and record["objects"][0].startswith("chunk 0's config")
    assert record["objects"][-1] == "the optimizer's config"


def test_allow_mismatch_accepts_the_named_field_and_keeps_it_in_the_record(cases: dict[str, Any]) -> None:
    case = cases["allowed"]
    assert case["error"] is None, case["message"]
    assert [m["field"] for m in case["record"]["allowed"]] == ["hidden_dropout"]
    assert case["record"]["mismatches"] == [] and case["la026"] == []


def test_a_setting_asked_for_that_the_models_config_class_has_no_field_for_did_not_land(cases: dict[str, Any]) -> None:
    case = cases["other_release"]
    assert case["error"] == "SettingsNotLanded" and case["fields"] == ["hidden_dropout"], case["message"]
    [mismatch] = case["record"]["mismatches"]
    assert (mismatch["kind"], mismatch["requested"], mismatch["found"]) == ("not-landed", "0.2", "no such field")
    assert "hidden_dropout (model.hidden_dropout): requested 0.2, found no such field" in case["message"]
    assert case["la026"] and "hidden_dropout" in case["la026"][0]


def test_a_bridge_style_provide_object_is_compared_with_its_own_fields(cases: dict[str, Any]) -> None:
    kept = cases["bridge_style"]
    assert kept["error"] is None, kept["message"]
    assert kept["record"]["mismatches"] == [] and kept["record"]["compared"] > 100
    assert kept["record"]["objects"][0] == "chunk 0's config (the provider's config)"  # the object's own
    lost = cases["bridge_style_dropping"]
    assert lost["error"] == "SettingsNotLanded" and lost["fields"] == ["hidden_dropout"]
    [mismatch] = lost["record"]["mismatches"]
    assert (mismatch["requested"], mismatch["found"]) == ("0.2", "0.0")
    assert "asked_as" not in mismatch  # set on the provider object, not through the RunConfig


@pytest.mark.parametrize("label", ["model_config", "model_builder"])
def test_megatron_lms_model_config_and_builder_are_compared_with_their_own_transformer(
    cases: dict[str, Any], label: str
) -> None:
    if label not in cases:
        pytest.skip("megatron-core < 0.17 ships no megatron.training.models")
    case = cases[label]
    assert case["error"] is None, case["message"]
    assert case["record"]["mismatches"] == [] and case["record"]["compared"] > 100
    assert case["record"]["objects"][0] == "chunk 0's config (the provider's config)"


def test_a_megatron_lm_builder_whose_model_lost_a_setting_is_caught(cases: dict[str, Any]) -> None:
    if "model_builder_dropping" not in cases:
        pytest.skip("megatron-core < 0.17 ships no megatron.training.models")
    lost = cases["model_builder_dropping"]
    assert lost["error"] == "SettingsNotLanded" and lost["fields"] == ["hidden_dropout"]
    [mismatch] = lost["record"]["mismatches"]
    assert (mismatch["requested"], mismatch["found"]) == ("0.2", "0.0")
    assert "not the provider's config" in mismatch["where"]
    assert lost["la026"] and "hidden_dropout" in lost["la026"][0]
