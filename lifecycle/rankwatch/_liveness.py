"""Whether a peer process still exists, and what a lost store connection means (_watch.py uses both).

A rank killed outright (SIGKILL, the OOM killer) publishes nothing. On its own host the other ranks
see it at once: its pid is gone or a zombie. Elsewhere its heartbeat stands still. The rendezvous
store's host going away shows as a store operation that fails at once with a closed connection
("Connection was likely closed", "Broken pipe", "Connection refused"), not as one that times out.
"""

from __future__ import annotations

import functools
import os
import re
import socket
import time
from pathlib import Path

from lifecycle.errors import DistributedError
from lifecycle.launchers import proc_stat

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
    stat = proc_stat(pid)
    if stat is not None:
        return not stat.ended
    try:  # no such process, or /proc cannot say (not Linux): existence only
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def started(pid: int) -> str:
    """`pid`'s start time (clock ticks since boot), or "" where /proc cannot say."""
    stat = proc_stat(pid)
    return "" if stat is None else str(stat.starttime)


@functools.cache
def _machine() -> str:
    """This boot of this machine and this process's pid namespace (`<boot id>/<namespace>`): where a pid
    means this process; "" where /proc cannot say."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        space = "".join(c for c in os.readlink("/proc/self/ns/pid") if c.isdigit())
    except OSError:
        return ""
    return f"{boot}/{space}" if boot and space else ""


def owner() -> str:
    """This process as the owner of a node-local directory: `pid:start:machine` (`owner_gone` reads it)."""
    pid = os.getpid()
    return f"{pid}:{started(pid)}:{_machine()}"


def owner_in(path: Path, line: int = 0) -> str:
    """The owner record on line `line` of `path`, a small file of ours read never through a link; "" where
    it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as file:
        lines = file.read(512).decode(errors="replace").splitlines()
    return lines[line] if line < len(lines) else ""


def owner_gone(record: str) -> bool:
    """True only where the process `record` names (`owner`'s, or a bare pid) is surely gone: no such pid
    here, a zombie, or a pid now held by a process started at another time (a reused pid). An owner on
    another machine or pid namespace, or a record this cannot read, may be alive: False."""
    parts = record.strip().split(":")
    if not parts[0].isdigit():
        return False
    pid = int(parts[0])
    if len(parts) == 1:  # a bare pid (meetings before owner records): gone where no such process is
        return not process_alive(pid)
    if len(parts) != 3 or not parts[2] or parts[2] != _machine():
        return False
    if not process_alive(pid):
        return True
    now = started(pid)
    return bool(parts[1]) and bool(now) and now != parts[1]


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


_FIRED = (
    (re.compile(r"timed out waiting (\d+)\s*ms", re.IGNORECASE), 1000),  # gloo: "Timed out waiting 3000ms for recv"
    (re.compile(r"timeout\(ms\)=(\d+)", re.IGNORECASE), 1000),  # NCCL's watchdog: "WorkNCCL(..., Timeout(ms)=600000)"
)
SAME_TIMEOUT = 0.01
"""How far (relative) a timeout named by an error may be from `startup.timeout_s` and still be it."""


def fired_after_s(exc: BaseException) -> float | None:
    """The timeout that fired, in seconds, where torch's backend names it in the error (gloo's
    "Timed out waiting 3000ms", NCCL's watchdog "Timeout(ms)=600000"); None where it names none."""
    text = str(exc)
    for pattern, per_s in _FIRED:
        if (found := pattern.search(text)) is not None:
            return int(found.group(1)) / per_s
    return None


def timeout_error(exc: BaseException, *, state: str, rank: int, timeout_s: float) -> DistributedError:
    """The error a rank raises when a wait in `state` timed out and no rank reported a failure. A
    group's own timeout that is not `startup.timeout_s` is named as that, with its fix
    ("timed out after startup.timeout_s" would send users to the wrong setting)."""
    cause = f"{type(exc).__name__}: {exc}"
    fired = fired_after_s(exc)
    if fired is None or abs(fired - timeout_s) <= SAME_TIMEOUT * timeout_s:
        return DistributedError(
            f"{state} timed out after {timeout_s:g} s on rank {rank} ({cause}); no rank reported a failure. "
            "Raise startup.timeout_s if this state is slow",
            field="startup.timeout_s",
        )
    return DistributedError(
        f"{state}: a collective timed out after {fired:g} s on rank {rank}, its process group's own timeout, "
        f"not startup.timeout_s ({timeout_s:g} s) ({cause}); no rank reported a failure. Give the group the "
        "startup's timeout: new_group(timeout=...) where it is made (the startup log's timeouts_read and "
        "group_created records name each group's timeout and creator; lifecycle audit --select LA028)",
        field="process_group.timeout",
    )


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
