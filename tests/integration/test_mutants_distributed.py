"""`startup.timeout_s` reaches every wait of DISTRIBUTED, read back from what torch and megatron made:
the rendezvous store, the default process group's backend and megatron's groups (gloo ones too).
Not torch's 30-minute default. One rank in this process (megatron imported once), through the
store path that multi-rank jobs take (MASTER_ADDR set) and the lone-process path (a HashStore).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from lifecycle import RunConfig
from states import Trigger
from tests.phase_context import RecordingContext

pytestmark = pytest.mark.slow

TIMEOUT_S = 37.0
LAUNCHER = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "TORCHELASTIC_USE_AGENT_STORE",
)


def _backend_timeout(group: Any) -> timedelta:
    import torch

    return group._get_backend(torch.device("cpu")).options._timeout  # type: ignore[no-any-return]


def _observe(env: dict[str, str]) -> dict[str, Any]:
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    from lifecycle.megatron import distributed, services_ready, validated

    saved = {k: os.environ.pop(k) for k in LAUNCHER if k in os.environ}
    os.environ.update(env)
    try:
        config = RunConfig.preset("tiny-gpt", [f"startup.timeout_s={TIMEOUT_S}"])
        ctx = RecordingContext.for_config(config)
        ctx.advance(validated.enter(ctx), Trigger.START_SERVICES)
        ctx.advance(services_ready.enter(ctx), Trigger.INIT_DISTRIBUTED)
        runtime = distributed.enter(ctx)
        try:
            seen = {
                "default": _backend_timeout(dist.distributed_c10d._get_default_group()),
                "dp": _backend_timeout(ps.get_data_parallel_group()),
                "tp": _backend_timeout(ps.get_tensor_model_parallel_group()),
                "dp_gloo": _backend_timeout(ps.get_data_parallel_group_gloo()),
                "watched": "rank_watch" in runtime.extras,
            }
            stores = list(distributed._STORES.values())
            seen["store"] = stores[-1][0].timeout if "MASTER_ADDR" in env else None
        finally:
            distributed.release(ctx, runtime)
        seen["released"] = not dist.is_initialized()
        return seen
    finally:
        for key in env:
            os.environ.pop(key, None)
        os.environ.update(saved)


@pytest.fixture(scope="module")
def timeouts() -> Iterator[dict[str, dict[str, Any]]]:
    from lifecycle.engine.launch import free_port

    store = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "1", "RANK": "0"}
    yield {"store": _observe(store), "lone": _observe({})}


@pytest.mark.parametrize("path", ["store", "lone"])
def test_the_deadline_reaches_the_process_group_and_every_megatron_group(
    timeouts: dict[str, dict[str, Any]], path: str
) -> None:
    seen = timeouts[path]
    want = timedelta(seconds=TIMEOUT_S)
    assert {k: seen[k] for k in ("default", "dp", "tp", "dp_gloo")} == dict.fromkeys(
        ("default", "dp", "tp", "dp_gloo"), want
    )
    assert seen["released"]


def test_the_deadline_reaches_the_rendezvous_store_and_the_watch_runs(timeouts: dict[str, dict[str, Any]]) -> None:
    assert timeouts["store"]["store"] == timedelta(seconds=TIMEOUT_S)
    assert timeouts["store"]["watched"] and not timeouts["lone"]["watched"]
