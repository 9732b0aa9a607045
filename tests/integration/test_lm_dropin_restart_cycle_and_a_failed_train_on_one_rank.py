"""The drop-in's `pretrain` on a world of one rank in the test process (gloo, no rank launched):
under an in-process call wrapper (one given as is, with its `iteration`) every record carries that
restart cycle; and when Megatron-LM's `train()` fails, its frames let go of the model before the
lifecycle's releases check that what each state made is gone. The two-rank runs of the same are
test_inprocess_call_wrapper.py's and test_megatron_lm_peer_failure.py's (launched ranks)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

pytest.importorskip("megatron.training", reason="megatron-core < 0.17 ships no megatron.training")

import torch.distributed as dist
from megatron.core.enums import ModelType

from lifecycle.lm_dropin import pretrain
from lifecycle.testing import leaked
from tests.integration.test_lm_dropin_pretrains_a_tiny_gpt_in_one_process import (
    _container_of_derived_arguments,
    _events,
    _records,
    one_rank,
    script,
)


class _GivenWrapper:
    """A call wrapper as nvidia-resiliency-ext's `inprocess.Wrapper` injects one: its restart `iteration`."""

    def __init__(self, iteration: int) -> None:
        self.iteration = iteration


@pytest.fixture(scope="module")
def failed_in_train(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The script's container, in restart cycle 3 of a given call wrapper on a store of the caller's,
    its forward step raising at the first step; the model as the forward step got it, weakly."""
    log_dir = tmp_path_factory.mktemp("failed-train")
    out: dict[str, Any] = {}

    def forward_step(data_iterator: Any, model: Any) -> Any:
        out["model"] = weakref.ref(model)
        raise RuntimeError("injected fault in the first forward step")

    with one_rank():
        container = _container_of_derived_arguments()
        with pytest.raises(RuntimeError) as failed:  # train()'s own error, as Megatron-LM's pretrain raises it
            pretrain(
                container,
                script.train_valid_test_datasets_provider,
                ModelType.encoder_or_decoder,
                forward_step,
                store=dist.HashStore(),
                inprocess_call_wrapper=_GivenWrapper(3),
                log_dir=log_dir,
            )
        out["error"] = str(failed.value)
        gc.collect()
        out["model_alive"] = out["model"]() is not None  # while the caller still holds the error
    out["records"] = _records(log_dir)
    return out


def test_under_a_call_wrapper_every_record_of_the_call_carries_its_restart_cycle(
    failed_in_train: dict[str, Any],
) -> None:
    records = failed_in_train["records"]
    assert {r.get("cycle") for r in records[1:]} == {3}  # after the log's opening record
    assert [r["dest"] for r in _events(records, "transition_completed")][:5] == [
        "VALIDATED",
        "SERVICES_READY",
        "DISTRIBUTED",
        "MODEL_BUILT",
        "CALLBACKS_BOUND",
    ]


def test_a_failed_train_lets_go_of_the_model_before_the_releases_check_it(failed_in_train: dict[str, Any]) -> None:
    assert "injected fault in the first forward step" in failed_in_train["error"]
    assert leaked(failed_in_train["records"]) == []  # each state's release found what it made gone
    assert not failed_in_train["model_alive"]  # the error's traceback holds none of the model's memory
