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

    from lifecycle.core_entry import distributed, services_ready, validated

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
                "watched": runtime.rank_watch is not None,
                "watch_deadline": getattr(runtime.rank_watch, "timeout_s", None),
                "watch_store": type(getattr(runtime.rank_watch, "store", None)).__name__,
            }
            stores = list(distributed.STORES.values())
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
    from lifecycle.launchers.local import free_port

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
    assert timeouts["store"]["watched"] and timeouts["store"]["watch_deadline"] == TIMEOUT_S


def test_a_lone_process_gets_a_watch_with_the_deadline_on_its_own_in_memory_store(
    timeouts: dict[str, dict[str, Any]],
) -> None:
    lone = timeouts["lone"]
    assert (lone["watched"], lone["watch_deadline"], lone["watch_store"]) == (True, TIMEOUT_S, "HashStore")


# -- the decisions inside the rendezvous, on real TCPStores on localhost (no process group) ----------

PREFIX = "megatron-lifecycle/attempt-{}/init-{}/k"


@pytest.fixture
def rendezvous(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, int]]:
    """MASTER_ADDR:MASTER_PORT on a free local port, no other launcher variable; forgets its store."""
    from lifecycle.core_entry import distributed
    from lifecycle.launchers.local import free_port

    for key in (*LAUNCHER, "TORCHELASTIC_RESTART_COUNT"):
        monkeypatch.delenv(key, raising=False)
    where = ("127.0.0.1", free_port())
    monkeypatch.setenv("MASTER_ADDR", where[0])
    monkeypatch.setenv("MASTER_PORT", str(where[1]))
    yield where
    distributed.STORES.pop(where, None)


def _host(where: tuple[str, int], world: int = 2) -> Any:
    """A store hosted by someone else: rank 0 of another process, or torchrun's agent."""
    import torch.distributed as dist

    return dist.TCPStore(*where, world, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=10))


def test_each_initialization_gets_its_own_prefix_on_one_long_lived_store(rendezvous: tuple[str, int]) -> None:
    from lifecycle.core_entry.distributed import STORES, rendezvous_store

    rendezvous_store(0, 1, 10.0).set("k", "first")
    rendezvous_store(0, 1, 10.0).set("k", "second")
    (raw, served), *others = [entry for key, entry in STORES.items() if key == rendezvous]
    assert not others and served == 2
    assert [raw.check([PREFIX.format(0, n)]) for n in range(4)] == [False, True, True, False]
    assert [raw.get(PREFIX.format(0, n)) for n in (1, 2)] == [b"first", b"second"]


@pytest.mark.parametrize(("count", "attempt"), [("2", 2), ("0", 0)])
def test_each_attempt_of_torchruns_agent_gets_its_own_keys(
    rendezvous: tuple[str, int], monkeypatch: pytest.MonkeyPatch, count: str, attempt: int
) -> None:
    from lifecycle.core_entry.distributed import STORES, rendezvous_store

    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", count)
    rendezvous_store(0, 1, 10.0).set("k", "v")
    assert STORES[rendezvous][0].get(PREFIX.format(attempt, 1)) == b"v"


def test_the_store_waits_ten_minutes_unless_told_otherwise(rendezvous: tuple[str, int]) -> None:
    from lifecycle.core_entry.distributed import STORES, rendezvous_store

    rendezvous_store(0, 2)
    assert STORES[rendezvous][0].timeout == timedelta(seconds=600)
    rendezvous_store(0, 2, 12.0)
    assert STORES[rendezvous][0].timeout == timedelta(seconds=12)


def test_rank_0_hosts_the_store_without_waiting_for_the_others(rendezvous: tuple[str, int]) -> None:
    from lifecycle.core_entry.distributed import rendezvous_store

    rendezvous_store(0, 2, 1.0).set("k", "v")  # rank 1 never comes: the host does not wait for it
    client = _host_client(rendezvous)
    assert client.get(PREFIX.format(0, 1)) == b"v"


def _host_client(where: tuple[str, int]) -> Any:
    import torch.distributed as dist

    return dist.TCPStore(*where, 2, is_master=False, timeout=timedelta(seconds=10))


@pytest.mark.parametrize(("rank", "agent"), [(1, False), (0, True), (1, True)])
def test_a_rank_that_does_not_host_the_store_joins_its_host(
    rendezvous: tuple[str, int], monkeypatch: pytest.MonkeyPatch, rank: int, agent: bool
) -> None:
    from lifecycle.core_entry.distributed import rendezvous_store

    if agent:
        monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    host = _host(rendezvous)  # hosting again on its port would fail: address in use
    rendezvous_store(rank, 2, 10.0).set("k", "v")
    assert host.get(PREFIX.format(0, 1)) == b"v"


def _store_config(timeout_s: float = 10.0) -> RunConfig:
    return RunConfig.preset("tiny-gpt", [f"startup.timeout_s={timeout_s}"])


def _checked_in(rank: int, world: int, provided: Any = None) -> tuple[Any, Any, RecordingContext]:
    import dataclasses

    from lifecycle.core_entry.distributed import checked_in_store

    ctx = RecordingContext.for_config(_store_config(), trigger=Trigger.INIT_DISTRIBUTED)
    ctx.runtime = dataclasses.replace(ctx.runtime, rendezvous_store=provided)
    store, watch = checked_in_store(ctx, ctx.runtime.config, rank, world)
    return store, watch, ctx


TIMED_OUT = TimeoutError("127.0.0.1:1 accepted no connection in 10 s")


@pytest.mark.parametrize(
    ("rank", "agent", "error", "unreachable"),
    [
        (1, False, TIMED_OUT, True),  # rank 0 never came
        (0, True, TIMED_OUT, True),  # torchrun's agent never came
        (1, True, TIMED_OUT, True),
        (0, False, TIMED_OUT, False),  # rank 0 hosts the store: its own failure, as torch raised it
        (1, False, OSError("no route to host"), False),  # not a timeout: as raised
        (0, True, ValueError("bad port"), False),
    ],
)
def test_a_failed_rendezvous_is_blamed_on_the_host_only_when_a_client_timed_out(
    rendezvous: tuple[str, int],
    monkeypatch: pytest.MonkeyPatch,
    rank: int,
    agent: bool,
    error: Exception,
    unreachable: bool,
) -> None:
    from lifecycle.core_entry import distributed
    from lifecycle.errors import DistributedError

    def failing(*_: Any) -> Any:
        raise error

    if agent:
        monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.setattr(distributed, "rendezvous_store", failing)
    with pytest.raises(Exception) as caught:
        _checked_in(rank, 2)
    if unreachable:
        assert isinstance(caught.value, DistributedError) and caught.value.__cause__ is error
        assert str(caught.value).startswith("rendezvous timed out after 10 s: could not reach the store")
    else:
        assert caught.value is error


def test_a_client_whose_host_never_listens_times_out_naming_rank_0(rendezvous: tuple[str, int]) -> None:
    import dataclasses

    from lifecycle.core_entry.distributed import checked_in_store
    from lifecycle.errors import DistributedError

    ctx = RecordingContext.for_config(_store_config(1.0), trigger=Trigger.INIT_DISTRIBUTED)
    ctx.runtime = dataclasses.replace(ctx.runtime, rendezvous_store=None)
    with pytest.raises(DistributedError, match=r"store at 127\.0\.0\.1:\d+ that rank 0 hosts; missing: rank 0") as e:
        checked_in_store(ctx, ctx.runtime.config, 1, 2)
    assert isinstance(e.value.__cause__, TimeoutError)
    assert ctx.events() == ["state_timeout"]


@pytest.mark.parametrize("how", ["rank 0", "agent", "provided"])
def test_the_watcher_knows_who_hosts_the_store_and_whether_it_may_end_the_process(
    rendezvous: tuple[str, int], monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    from lifecycle.core_entry import distributed

    host = None if how == "rank 0" else _host(rendezvous)
    if how == "agent":
        monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    # an in-process restart wrapper's store: the process must live on to be restarted in place
    _, watch, _ = _checked_in(0, 1, host if how == "provided" else None)
    try:
        assert watch.store_host == (None if how == "agent" else 0)
        assert watch._exit is (distributed.stay_alive if how == "provided" else os._exit)
        assert watch.checkin.interruptible is (how == "provided")  # the wrapper's restart request must land
    finally:
        watch.stop()


@pytest.mark.parametrize(("generation", "provided_in", "since"), [(2, 2, 0), (1, 1, 0), (3, 1, 2)])
def test_a_provided_stores_keys_count_the_restarts_since_it_was_provided_not_the_generation(
    rendezvous: tuple[str, int], generation: int, provided_in: int, since: int
) -> None:
    """Under the restart wrapper a rank that was restarted while still at VALIDATED has one restart
    fewer than its peers: the cycle's store, provided anew in each cycle, must get the same keys on
    both (with the generation in them, the ranks waited for each other until the deadline)."""
    import dataclasses

    from lifecycle.core_entry.distributed import checked_in_store

    host = _host(rendezvous, world=1)
    ctx = RecordingContext.for_config(_store_config(), trigger=Trigger.INIT_DISTRIBUTED)
    ctx.runtime = dataclasses.replace(
        ctx.runtime, rendezvous_store=host, generation=generation, rendezvous_generation=provided_in
    )
    store, watch = checked_in_store(ctx, ctx.runtime.config, 0, 1)
    try:
        store.set("k", "v")
        assert host.get(f"megatron-lifecycle/rendezvous-{since}/k") == b"v"
    finally:
        watch.stop()


def test_a_process_group_that_fails_to_start_stops_the_watcher(rendezvous: tuple[str, int]) -> None:
    import threading

    import torch.distributed as dist

    from lifecycle.core_entry.distributed import init_process_group

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # someone else's
    try:
        ctx = RecordingContext.for_config(_store_config(), trigger=Trigger.INIT_DISTRIBUTED)
        with pytest.raises(ValueError, match="twice"):
            init_process_group(ctx, ctx.runtime.config, real_cuda=False)
    finally:
        dist.destroy_process_group()
    assert [t.name for t in threading.enumerate() if t.name == "lifecycle-rank-watch"] == []


def test_the_fake_backend_simulates_the_configured_rank_without_a_store() -> None:
    import torch.distributed as dist

    from lifecycle.core_entry.distributed import init_process_group

    config = RunConfig.preset("tiny-gpt", ["backend=fake", "parallel.rank=1", "parallel.world_size=4"])
    ctx = RecordingContext.for_config(config, trigger=Trigger.INIT_DISTRIBUTED)
    try:
        assert init_process_group(ctx, config, real_cuda=False) == (1, 4, None)
        assert dist.get_backend() == "fake"
    finally:
        dist.destroy_process_group()
    assert [str(s) for s in ctx.side_effects] == ["SideEffect.PROCESS_GROUP"]


def test_the_release_gives_back_the_launchers_rank_and_world_size() -> None:
    """A restart cycle's next failure before DISTRIBUTED (its SERVICES_READY, say) is published
    under `runtime.rank`: it must still be this process's rank, not 0 (the cause then named rank 0)."""
    from lifecycle.core_entry import distributed, services_ready, validated

    config = RunConfig.preset("tiny-gpt", ["backend=fake", "parallel.rank=3", "parallel.world_size=4"])
    ctx = RecordingContext.for_config(config)
    ctx.advance(validated.enter(ctx), Trigger.START_SERVICES)
    ctx.advance(services_ready.enter(ctx), Trigger.INIT_DISTRIBUTED)
    runtime = distributed.enter(ctx)
    assert (runtime.rank, runtime.world_size, runtime.distributed) == (3, 4, True)
    released = distributed.release(ctx, runtime)
    assert (released.rank, released.world_size, released.distributed) == (3, 4, False)
