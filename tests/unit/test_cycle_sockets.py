"""`lifecycle.resilience._sockets.CycleSockets`: at a fault, the TCP connections a cycle opened are
shut down (a peer blocked reading one sees the end at once, as when a process dies), while those
opened before the cycle, those to or from a store's port, and listening sockets stay usable."""

from __future__ import annotations

import shutil
import socket
import subprocess
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


def test_a_listener_the_cycle_opened_keeps_accepting_after_the_cut() -> None:
    """gloo's listener is opened in the cycle, like its pairs; only the connections are cut (a
    listener shut down fails its next accept, and gloo's then terminates the process)."""
    cycle = CycleSockets([])
    listener = socket.create_server(("127.0.0.1", 0))
    gloo = _pair(listener)
    try:
        assert cycle.cut() == 2
        assert gloo[1].recv(1) == b""
        later = _pair(listener)
        later[0].sendall(b"a")
        assert later[1].recv(1) == b"a"
        for s in later:
            s.close()
    finally:
        for s in (*gloo, listener):
            s.close()


def test_a_rank_that_ends_with_a_cut_pending_exits_at_once() -> None:
    """The delayed cut runs on a daemon thread: a process that ends before it is due does not wait
    for it (here ten minutes)."""
    code = (
        "import socket\n"
        "from lifecycle.testing import CycleSockets\n"
        "cycle = CycleSockets([])\n"
        "listener = socket.create_server(('127.0.0.1', 0))\n"
        "client = socket.create_connection(listener.getsockname())\n"
        "server, _ = listener.accept()\n"
        "assert cycle.cut_later(600).is_alive()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


ALONE = """
import fcntl, socket, struct
from lifecycle.testing import CycleSockets

# A new network namespace starts with its loopback down: SIOCGIFFLAGS, then SIOCSIFFLAGS with IFF_UP.
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack("16sH", fcntl.ioctl(probe, 0x8913, struct.pack("16sH", b"lo", 0)))[1]
fcntl.ioctl(probe, 0x8914, struct.pack("16sH", b"lo", flags | 1))
cycle = CycleSockets([])
listener = socket.create_server(("127.0.0.1", 0))
client = socket.create_connection(listener.getsockname())
server, _ = listener.accept()
listener.close()
print(cycle.cut(), server.recv(1))
"""


def test_every_connection_is_cut_when_the_cycles_are_the_only_ones_on_the_host() -> None:
    """In a network namespace of its own, with the listener closed once connected, the cycle's
    connection is all the kernel lists (its two ends, the first of them on the table's first row):
    both are cut."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-rn", "true"], capture_output=True).returncode != 0:
        pytest.skip("no network namespace of its own (unshare -rn) here")
    done = subprocess.run(
        [unshare, "-rn", sys.executable, "-c", ALONE], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.split() == ["2", "b''"]
