"""The connections a cycle opened (its gloo pairs), cut when the cycle fails on this rank.

gloo cannot abort a collective in flight, and a peer blocked in one with this rank leaves it only
when this rank's sockets close (as when a process dies) or at the collective's timeout
(`startup.timeout_s`). Destroying the process groups does not close them while anything holds the
gloo context. So at a fault every rank shuts down (`shutdown(SHUT_RDWR)`, not close: the
descriptors stay with their owners, who close them when the wrapper aborts the groups) each
established TCP connection opened since the cycle began, except those to or from the stores
(`keep_ports`: the wrapper's own store must keep working). Linux only (/proc); elsewhere nothing
is cut.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterable
from pathlib import Path

_FD = Path("/proc/self/fd")
_ESTABLISHED = "01"  # never a listening socket: gloo's listener dies (terminate) when its accept fails


def _socket_fds() -> dict[int, int]:
    """inode -> descriptor of each socket this process has open now."""
    out: dict[int, int] = {}
    with contextlib.suppress(OSError):
        for name in os.listdir(_FD):
            with contextlib.suppress(OSError, ValueError):
                target = os.readlink(_FD / name)
                if target.startswith("socket:["):
                    out[int(target[8:-1])] = int(name)
    return out


def _tcp_ports() -> dict[int, tuple[int, int]]:
    """inode -> (local port, remote port) of this network namespace's established TCP connections."""
    out: dict[int, tuple[int, int]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if len(fields) > 9 and fields[3] == _ESTABLISHED:
                    local, remote = (int(a.rsplit(":", 1)[1], 16) for a in fields[1:3])
                    out[int(fields[9])] = (local, remote)
    return out


class CycleSockets:
    """`CycleSockets(keep_ports)` when a cycle begins; `cut()` when it fails: shuts down what it opened."""

    def __init__(self, keep_ports: Iterable[int | None]) -> None:
        self.keep = {p for p in keep_ports if p}
        self.before = set(_socket_fds())

    def opened(self) -> dict[int, int]:
        """inode -> descriptor of the TCP sockets opened since the cycle began, stores' excepted."""
        ports = _tcp_ports()
        return {
            inode: fd
            for inode, fd in _socket_fds().items()
            if inode not in self.before and inode in ports and not self.keep & set(ports[inode])
        }

    def cut(self, inodes: Iterable[int] | None = None) -> int:
        """Shut down what `opened` names now (or those of `inodes` still open); how many were cut.
        Never raises."""
        chosen = self.opened() if inodes is None else {i: fd for i, fd in _socket_fds().items() if i in set(inodes)}
        cut = 0
        for fd in chosen.values():
            with contextlib.suppress(OSError, ValueError):
                sock = socket.socket(fileno=fd)
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                    cut += 1
                finally:
                    sock.detach()
        return cut

    def cut_later(self, delay_s: float) -> threading.Timer:
        """`cut` what is open now, `delay_s` from now, on a thread (cancel or join it before the next
        cycle).
        A descriptor closed and reused meanwhile is another socket (another inode): left alone."""
        inodes = set(self.opened())
        thread = threading.Timer(delay_s, self.cut, args=(inodes,))
        thread.name, thread.daemon = "lifecycle-cut-connections", True
        thread.start()
        return thread
