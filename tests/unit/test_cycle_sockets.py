"""`lifecycle.resilience._sockets.CycleSockets`: at a fault, the TCP connections a cycle opened are
shut down (a peer blocked reading one sees the end at once, as when a process dies), while those
opened before the cycle, those to or from a store's port, and listening sockets stay usable."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator

import pytest

from lifecycle.testing import CycleSockets

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _pair(listener: socket.socket) -> tuple[socket.socket, socket.socket]:
    client = socket.create_connection(listener.getsockname()[:2], timeout=5)
    server, _ = listener.accept()
    server.settimeout(5)
    return client, server


@pytest.fixture
def listeners() -> Iterator[list[socket.socket]]:
    made = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    yield made
    for s in made:
        s.close()


def test_a_fault_cuts_what_the_cycle_opened_and_keeps_the_rest(listeners: list[socket.socket]) -> None:
    plain, store = listeners
    older = _pair(plain)  # before the cycle began
    cycle = CycleSockets([store.getsockname()[1], None])
    gloo = _pair(plain)  # the cycle's: cut
    to_store = _pair(store)  # to a store's port: kept
    try:
        assert cycle.cut() == 2  # both ends of the cycle's connection live in this process
        assert gloo[1].recv(1) == b""  # the peer's blocked read ends at once
        with pytest.raises(OSError):
            gloo[0].send(b"x")
        for client, server in (older, to_store):
            client.sendall(b"k")
            assert server.recv(1) == b"k"
        third = _pair(plain)  # the listener still accepts
        third[0].sendall(b"a")
        assert third[1].recv(1) == b"a"
        for s in third:
            s.close()
        assert gloo[0].fileno() >= 0  # shut down, not closed: the owner still closes it
    finally:
        for s in (*older, *gloo, *to_store):
            s.close()


def test_nothing_opened_nothing_cut(listeners: list[socket.socket]) -> None:
    assert CycleSockets([]).cut() == 0
