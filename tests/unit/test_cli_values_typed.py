"""The CLI's values stay typed: a provider is resolved once into a `Provider` the entry work takes as
it is, and flags (`--plan`, `--overwrite`, `--log-dir`, the launch world size) set config fields as
typed values after `--set`, never as override text read again."""

from __future__ import annotations

from pathlib import Path

import pytest

from lifecycle import RunConfig
from lifecycle.cli import build_parser, load
from lifecycle.core_entry.providers import PROVIDERS
from lifecycle.core_entry.user_providers import MegatronLMProvider, Provider, display_name, resolve_provider
from lifecycle.errors import ConfigError, ProviderError

MEGATRON_LM_SHAPED = (
    "def model_provider(pre_process=True, post_process=True):\n    return (pre_process, post_process)\n"
)


def test_a_provider_is_resolved_once_and_named_by_what_the_user_wrote(tmp_path: Path) -> None:
    path = tmp_path / "models.py"
    path.write_text(MEGATRON_LM_SHAPED)
    spec = f"{path}:model_provider"
    provider = Provider.of(spec)
    assert isinstance(provider.call, MegatronLMProvider) and provider.name == spec
    # what the entry work does with it: the same callable and name, nothing loaded or adapted again
    assert Provider.of(provider) is provider
    assert resolve_provider(provider) is provider.call
    assert display_name(provider) == spec
    assert resolve_provider(spec) is not resolve_provider(spec)  # a spec, by contrast, is adapted each time
    returned = provider(None, pre_process=True, post_process=False, vp_stage=None, inputs=None)
    assert returned == (True, False)  # called in our shape, passed on in Megatron-LM's


def test_a_known_name_resolves_to_the_shipped_provider_and_a_bad_one_fails_as_before() -> None:
    gpt = Provider.of("gpt")
    assert gpt.call is PROVIDERS["gpt"] and gpt.name == "gpt"
    assert Provider.of(None).call is PROVIDERS["gpt"] and Provider.of(None).name == "gpt"
    with pytest.raises(ProviderError, match="neither a known provider"):
        Provider.of("omni")
    with pytest.raises(ProviderError, match="is not callable"):
        Provider.of(42)


def test_typed_values_apply_after_overrides_and_are_never_read_as_text() -> None:
    config = RunConfig.preset(
        "tiny-gpt", ["plan=inference", "logging.log_dir=a"], values={"plan": "training", "logging.log_dir": "runs/x #1"}
    )
    assert config.plan == "training" and config.logging.log_dir == "runs/x #1"
    assert RunConfig.from_dict({}, values={"logging.log_dir": "~"}).logging.log_dir == "~"
    with pytest.raises(ConfigError, match="parallel.world_size: expected an integer, got '2'"):
        RunConfig.from_dict({}, values={"parallel.world_size": "2"})
    with pytest.raises(ConfigError, match="unknown key 'parallel.wrold_size'"):
        RunConfig.from_dict({}, values={"parallel.wrold_size": 2})
    with pytest.raises(ConfigError, match="'plan' is not a section"):
        RunConfig.from_dict({"plan": "training"}, values={"plan.x": 1})


def test_run_flags_win_over_set_and_a_log_dir_stays_as_typed(tmp_path: Path) -> None:
    log_dir = str(tmp_path / "runs #1" / "~")
    args = build_parser().parse_args(
        ["run", "--set", "plan=training", "--plan", "inference", "--overwrite", "--log-dir", log_dir]
    )
    config = load(args)
    assert (config.plan, config.logging.existing, config.logging.log_dir) == ("inference", "overwrite", log_dir)


def test_a_resolved_provider_gets_the_config_of_the_callable_it_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    from lifecycle.core_entry import compat
    from lifecycle.core_entry.providers import builds_hybrid

    monkeypatch.setattr(compat, "megatron_core_version", lambda: (0, 19, 2))  # GPTModel deprecated there

    def mine(
        config: object, *, pre_process: bool, post_process: bool, vp_stage: int | None, inputs: object
    ) -> None: ...

    # as MODEL_BUILT asks: of the callable `resolve_provider` gives back for the Provider
    assert builds_hybrid(resolve_provider(Provider.of("gpt")))
    assert builds_hybrid(resolve_provider(Provider.of("hybrid-builder")))
    assert not builds_hybrid(resolve_provider(Provider.of(mine)))
