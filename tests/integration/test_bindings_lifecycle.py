"""Rebuild through `Lifecycle` with the real Megatron phases: the callbacks follow the rebuilt
model (plain and copying providers), the old model is freed, megatron's schedule finalizes once.

One spawned group of 2 gloo ranks, one lifecycle per rank: its provider switches between the
plain GPT provider and the copying one at each rebuild, so one process group serves every case.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

from lifecycle.launchers.local import run_ranks

pytestmark = pytest.mark.slow

SEQUENCE = ("gpt", "copying", "gpt")


class SwitchingProvider:
    """Delegates to the named provider in `mode`; tests switch it between rebuilds."""

    def __init__(self) -> None:
        self.mode = SEQUENCE[0]

    def __call__(self, config: Any, **kwargs: Any) -> Any:
        from lifecycle.core_entry.providers import PROVIDERS

        return PROVIDERS[self.mode](config, **kwargs)


def _generation(lc: Any, provider: SwitchingProvider, mode: str, targets: list[Any]) -> dict[str, Any]:
    """One generation; `targets` holds weak references to the earlier generations' bound configs."""
    from megatron.core.utils import get_model_config

    from lifecycle.core_entry.train import train_steps
    from states import State

    provider.mode = mode
    lc.advance_to(State.CALLBACKS_BOUND)
    binding = lc.runtime.binding
    old = weakref.ref(lc.runtime.model[0]), weakref.ref(lc.runtime.optimizer)
    scheduler = get_model_config(lc.runtime.model[0])
    out = {
        "target_id": binding.target_id,
        "copied": binding.copied,
        "on_scheduler": binding.target_id == hex(id(scheduler)),
        # an address can be reused once the old config is freed: compare objects, not ids
        "new_target": all(ref() is not scheduler for ref in targets),
        "steps": [s.finalizer_calls for s in train_steps(lc, 2)],
    }
    targets.append(weakref.ref(scheduler))
    del scheduler
    lc.rebuild()
    out["after_rebuild"] = (lc.state.name, lc.runtime.model, lc.runtime.binding, lc.runtime.distributed)
    gc.collect()
    out["old_freed"] = old[0]() is None and old[1]() is None
    return out


def _lifecycle() -> dict[str, Any]:
    import warnings

    import megatron_cases as mc

    from lifecycle import Lifecycle

    warnings.simplefilter("ignore")
    provider = SwitchingProvider()
    config = mc.run_config(ddp={"overlap_grad_reduce": True}, training={"num_microbatches": 3})
    with Lifecycle(config, provider=provider, options={"keep_records": True}) as lc:
        targets: list[Any] = []
        generations = [_generation(lc, provider, mode, targets) for mode in SEQUENCE]
        events = [r["event"] for r in lc.records]
    return {"generations": generations, "events": events}


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    return run_ranks(_lifecycle, 2, timeout_s=300)


@pytest.mark.parametrize("index", range(len(SEQUENCE)))
def test_rebuild_through_the_lifecycle_binds_to_the_rebuilt_model(ranks: list[dict[str, Any]], index: int) -> None:
    for result in ranks:
        case = result["generations"][index]
        assert case["copied"] is (SEQUENCE[index] == "copying")
        assert case["on_scheduler"]
        assert case["steps"] == [1, None]  # the watchdog checks each binding's first step only
        assert case["after_rebuild"] == ("DISTRIBUTED", None, None, True)
        assert case["old_freed"]


def test_every_rebuild_binds_a_new_target(ranks: list[dict[str, Any]]) -> None:
    """Each binding's target is a config object no earlier generation was bound to (their ids may
    repeat: CPython reuses a freed object's address)."""
    for result in ranks:
        assert [g["new_target"] for g in result["generations"]] == [True] * len(SEQUENCE)


def test_the_log_shows_bind_unbind_and_rebind_with_a_finalized_first_step_each_time(
    ranks: list[dict[str, Any]],
) -> None:
    wanted = ("model_built", "callbacks_bound", "first_step_finalized", "callbacks_unbound")
    names = [e for e in ranks[0]["events"] if e in wanted]
    assert names == list(wanted) * len(SEQUENCE)
