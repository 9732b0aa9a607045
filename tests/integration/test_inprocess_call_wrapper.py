"""`pretrain(..., store=, inprocess_call_wrapper=)` as Megatron-LM's (docs/restart.md#megatron-lms-pretrain):
each call rendezvouses on `store` prefixed with the wrapper's iteration, and its records carry that
cycle; nvidia-resiliency-ext's real `Wrapper` injects its CallWrapper into the drop-in's signature
(it cannot into a postponed annotation); a given wrapper is used as given where nvidia-resiliency-ext
is not installed; anything else is refused in one line naming the field."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest

from lifecycle.errors import ConfigError
from lifecycle.launchers.local import run_ranks
from lifecycle.resilience import client_timeout_s
from lifecycle.testing import cycle_and_store, installed_problem
from tests.integration import call_wrapper_cases


class _Given:
    def __init__(self, iteration: Any, base_store: Any = None) -> None:
        self.iteration, self.base_store = iteration, base_store


def _store() -> Any:
    import torch.distributed as dist

    return dist.HashStore()


def test_each_cycle_rendezvouses_on_the_given_store_under_its_iteration() -> None:
    given = _store()
    cycle, store = cycle_and_store(_Given(3), given)
    store.set("k", b"v")
    assert cycle == 3 and given.get("3/k") == b"v"  # Megatron-LM's PrefixStore(str(iteration), store)
    assert cycle_and_store(None, given) == (None, given)


def test_without_a_store_the_wrappers_own_store_is_used_under_a_cycle_prefix() -> None:
    base = _store()
    cycle, store = cycle_and_store(_Given(1, base), None)
    store.set("k", b"v")
    assert cycle == 1 and base.get("megatron-lifecycle/cycle-1/k") == b"v"


def test_the_store_clients_timeout_is_read_back_from_the_client_the_wrappers_own_else_300_s() -> None:
    """`cycle_started.restart_timeouts.store_client_s` (docs/restart.md): our own connection to the wrapper's store."""
    from datetime import timedelta

    import torch.distributed as dist

    from lifecycle.launchers.local import free_port

    base = dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True, timeout=timedelta(seconds=7))
    assert client_timeout_s(base) == 7.0
    untimed = dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True)
    named = _Given(0)  # names the host and port of a store, keeps no timeout of its own
    named.host, named.port = untimed.host, untimed.port  # type: ignore[attr-defined]
    assert client_timeout_s(named) == 300.0  # type: ignore[arg-type]
    assert client_timeout_s(object()) is None  # type: ignore[arg-type]  # not a store: nothing to read


@pytest.mark.parametrize(
    ("wrapper", "field", "words"),
    [
        (object(), "inprocess_call_wrapper", "expected nvidia-resiliency-ext's inprocess.CallWrapper"),
        (_Given("1"), "inprocess_call_wrapper", "got _Given"),
        (_Given(True), "inprocess_call_wrapper", "an integer .iteration"),
        (_Given(0), "store", "pass store="),
    ],
)
def test_a_wrong_wrapper_or_a_missing_store_is_refused_in_one_line(wrapper: Any, field: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        cycle_and_store(wrapper, None)
    assert caught.value.field == field and words in str(caught.value) and "\n" not in str(caught.value)


PROBLEM = installed_problem()


@pytest.mark.skipif(PROBLEM is not None, reason=f"nvidia-resiliency-ext: {PROBLEM}")
def test_nvrx_injects_its_call_wrapper_into_the_drop_in_signature_and_restarts_it() -> None:
    [out] = run_ranks(call_wrapper_cases.under_nvrx, 1, timeout_s=300)
    assert out["plain"].startswith("TypeError")  # a postponed annotation breaks nvrx's issubclass check
    wrapper = "nvidia_resiliency_ext.inprocess.wrap.CallWrapper"
    assert out["calls"] == [{"cycle": 0, "wrapper": wrapper}, {"cycle": 1, "wrapper": wrapper}]
    assert out["result"] == 1 and out["joined"] == [True, True]


@pytest.mark.skipif(PROBLEM is None, reason="nvidia-resiliency-ext is installed: the real wrapper is shown above")
def test_where_nvrx_is_not_installed_nothing_is_injected_without_it() -> None:
    from lifecycle.resilience import CallWrapperSlot

    fake = type("CallWrapper", (), {"__module__": "nvidia_resiliency_ext.inprocess.wrap"})
    assert not issubclass(fake, CallWrapperSlot)


def test_the_drop_in_pretrain_declares_the_wrapper_for_injection() -> None:
    pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")
    from lifecycle.lm_dropin import pretrain
    from lifecycle.resilience import CallWrapperSlot

    params = inspect.signature(pretrain).parameters
    annotated = {name: p.annotation for name, p in params.items() if p.annotation is not inspect.Parameter.empty}
    assert annotated == {"inprocess_call_wrapper": CallWrapperSlot}
    assert list(params)[9:11] == ["store", "inprocess_call_wrapper"]  # Megatron-LM's positions
    with pytest.raises(ConfigError, match="inprocess_call_wrapper: expected"):
        pretrain(None, None, None, None, inprocess_call_wrapper=object())


@pytest.mark.slow
def test_the_drop_in_uses_a_given_wrapper_as_given(tmp_path: Path) -> None:
    pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")
    results = run_ranks(call_wrapper_cases.dropin_with_given_wrapper, 2, str(tmp_path), timeout_s=400)
    assert [r["iteration"] for r in results] == [2, 2]  # trained 2 iterations
    assert results[0]["prefixed"] > 1  # the rendezvous went through the script's store (its host's count)
    assert [r["interruptible"] for r in results] == [[True], [True]]  # one rank watch each, interruptible
    for rank in (0, 1):
        records = [json.loads(line) for line in (tmp_path / f"rank-{rank:05d}.jsonl").read_text().splitlines()]
        assert {r["cycle"] for r in records[1:]} == {4}, rank
