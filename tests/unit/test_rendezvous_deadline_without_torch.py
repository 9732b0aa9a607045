"""The deadline of DISTRIBUTED's rendezvous without torch (lifecycle.core_entry.distributed): waiting for
the store's host on real sockets, and what a client rank says when that host never came.
tests/integration/test_startup_timeout_reaches_every_wait.py reads the deadline back from the process groups.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

from lifecycle.core_entry.distributed import store_unreachable
from lifecycle.errors import DistributedError
from lifecycle.log.records import Record
from lifecycle.rankwatch import await_store_host
from lifecycle.testing import fields_written


class Ctx:
    def __init__(self) -> None:
        self.emitted: list[tuple[str, dict[str, Any]]] = []
        self.trigger = type("T", (), {"value": "init_distributed"})

    def emit(self, record: Record) -> None:
        self.emitted.append(fields_written(record))


def test_a_store_host_that_listens_is_found_at_once() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        started = time.monotonic()
        await_store_host("127.0.0.1", server.getsockname()[1], 30.0)
        assert time.monotonic() - started < 25.0


def test_a_store_host_that_never_listens_is_a_timeout_naming_it_after_the_deadline() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        started = time.monotonic()
        with pytest.raises(TimeoutError) as caught:
            await_store_host("127.0.0.1", port, 0.6)
        assert time.monotonic() - started >= 0.6
    assert str(caught.value) == f"127.0.0.1:{port} accepted no connection in 0.6 s"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


@pytest.mark.parametrize(
    ("agent", "host", "fields", "missing"),
    [
        (False, "rank 0", {"missing": [0]}, "; missing: rank 0"),
        (True, "torchrun's agent", {}, ""),
    ],
)
def test_a_client_that_never_reached_the_store_logs_a_timeout_and_names_its_host(
    monkeypatch: pytest.MonkeyPatch, agent: bool, host: str, fields: dict[str, Any], missing: str
) -> None:
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.7")
    monkeypatch.setenv("MASTER_PORT", "29500")
    ctx = Ctx()
    error = store_unreachable(ctx, 45.0, agent)  # type: ignore[arg-type]
    assert isinstance(error, DistributedError) and error.field == "startup.timeout_s"
    assert str(error) == (
        f"rendezvous timed out after 45 s: could not reach the store at 10.0.0.7:29500 that {host} "
        f"hosts{missing}. Start {host}, or raise startup.timeout_s"
    )
    assert ctx.emitted == [
        ("state_timeout", {"state": "DISTRIBUTED", "trigger": "init_distributed", "timeout_s": 45.0, **fields})
    ]
