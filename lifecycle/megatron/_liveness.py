"""Whether a peer process still exists, and what a lost store connection means (ranks.py uses both).

A rank killed outright (SIGKILL, the OOM killer) publishes nothing. On its own host the other ranks
see it at once: its pid is gone or a zombie. Elsewhere its heartbeat stands still. The rendezvous
store's host going away shows as a store operation that fails at once with a closed connection
("Connection was likely closed", "Broken pipe", "Connection refused"), not as one that times out.
"""

from __future__ import annotations

import os
import socket
import time

HOST = socket.gethostname()


def host_key(node: str = HOST) -> str:
    """The store key counting a node's ranks (this host's by default); `<key>/<n>` holds the n-th
    one's `rank:pid` (the first one's, the node's leader, `rank:pid:nonce:index`)."""
    return f"host/{node}"


def identity(rank: int) -> bytes:
    """This process as `rank:pid`, what each rank writes under its host's key at check-in."""
    return f"{rank}:{os.getpid()}".encode()


def local_pids(entries: list[bytes], rank: int) -> dict[int, int]:
    """The other ranks on this host (from its `rank:pid` entries), with their pids."""
    out: dict[int, int] = {}
    for raw in entries:
        peer, _, rest = raw.decode(errors="replace").partition(":")
        pid = rest.partition(":")[0]
        if peer.isdigit() and pid.isdigit() and int(peer) != rank:
            out[int(peer)] = int(pid)
    return out


def process_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (a killed child its parent has not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (not Linux): existence only
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    state = text[text.rfind(b")") + 2 : text.rfind(b")") + 3]
    return state not in (b"Z", b"X", b"x")


def store_closed(exc: BaseException) -> bool:
    """A store operation that failed because the store's host closed or refused the connection."""
    text = str(exc).lower()
    return any(
        words in text
        for words in (
            "connection was likely closed",
            "broken pipe",
            "connection reset",
            "connection refused",
            "connection closed by peer",
            "failed to recv",
            "got 0 bytes",
        )
    )


def kind_of(exc: BaseException) -> str:
    """How a rank failed: a signal (KeyboardInterrupt, SystemExit), a timeout, or an exception."""
    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
        return "signal"
    return "timeout" if is_timeout(exc) else "exception"


def is_timeout(exc: BaseException) -> bool:
    """A store wait or collective that ran out of time: torch raises `DistStoreError`/`DistError` or,
    from gloo, a plain RuntimeError citing gloo's source; a user's error mentioning time is not one."""
    if isinstance(exc, TimeoutError):
        return True
    text = str(exc).lower()
    from_torch = type(exc).__module__.startswith("torch") or "gloo" in text or "c10d" in text
    return from_torch and ("timed out" in text or "timeout" in text)


def connection_lost(exc: BaseException) -> bool:
    """gloo's error when a peer process went away mid-collective."""
    text = str(exc).lower()
    return any(words in text for words in ("connection closed by peer", "connection reset", "broken pipe"))


def await_store_host(addr: str, port: int, timeout_s: float) -> None:
    """Wait until the store's host accepts connections, or raise TimeoutError after `timeout_s`.

    TCPStore's own client retries past its timeout (about twice it, measured on torch 2.13).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((addr, port), timeout=min(1.0, timeout_s)).close()
            return
        except OSError:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{addr}:{port} accepted no connection in {timeout_s:g} s") from None
            time.sleep(0.2)
