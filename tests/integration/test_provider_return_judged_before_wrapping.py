"""What a provider returned, judged before megatron wraps it (`check_chunk`), on real torch modules
and without megatron: one module per call, a torch.nn.Module, a config megatron can reach. Pinned down
for scripts/mutation (`core_entry.user_providers`); tests/integration/test_user_providers.py runs the
same refusals end to end. torch is imported inside the tests, so that a mutant the unit tests kill
never pays for it."""

from __future__ import annotations

from typing import Any

import pytest

from lifecycle.core_entry.user_providers import check_chunk
from lifecycle.errors import ProviderError

STAGE = (False, True, 1)


def _refusal(returned: Any) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        check_chunk(returned, provider="pkg:fn", chunk=1, stage=STAGE)
    error = caught.value
    assert str(error).startswith(
        "provider pkg:fn returned for chunk 1 (pre_process=False, post_process=True, vp_stage=1) "
    )
    assert (error.provider, error.chunk, error.returned) == ("pkg:fn", 1, type(returned).__name__)  # type: ignore[attr-defined]
    return error


def test_a_list_tuple_or_module_list_is_refused_asking_for_one_module_per_call() -> None:
    import torch

    for returned in (
        [torch.nn.Linear(1, 1)] * 2,
        (torch.nn.Linear(1, 1),) * 2,
        torch.nn.ModuleList([torch.nn.Linear(1, 1)] * 2),
    ):
        assert f"a {type(returned).__name__} of 2; return one module per call" in str(_refusal(returned))


def test_something_that_is_not_a_module_is_refused_showing_its_repr_cut_at_60_characters() -> None:
    assert "returned for chunk 1 (pre_process=False, post_process=True, vp_stage=1) None, not a torch.nn.Module" in str(
        _refusal(None)
    )
    exact = "x" * 58  # its repr, with the quotes, is 60 characters: shown whole
    assert f"'{exact}', not a torch.nn.Module" in str(_refusal(exact))
    longer = "y" * 59
    assert f" '{'y' * 56}..., not a torch.nn.Module" in str(_refusal(longer))


def test_a_module_with_no_reachable_config_is_refused_naming_its_submodules() -> None:
    import torch

    hides = torch.nn.Module()
    hides.net = torch.nn.Linear(1, 1)
    hides.head = torch.nn.Linear(1, 1)
    assert "a Module with no .config, and no .module holding one (its submodules: .net, .head)" in str(_refusal(hides))
    assert "(its submodules: none)" in str(_refusal(torch.nn.Module()))


def test_a_module_whose_config_megatron_can_reach_is_returned_as_it_is() -> None:
    import torch

    direct = torch.nn.Linear(1, 1)
    direct.config = "C"
    assert check_chunk(direct, provider="p", chunk=0, stage=(True, True, None)) is direct
    outer = torch.nn.Module()
    outer.module = direct
    assert check_chunk(outer, provider="p", chunk=0, stage=(True, True, None)) is outer
