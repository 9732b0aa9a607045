"""Run a function on N local ranks (spawned processes, env:// rendezvous), collect each rank's result.

Used by multi-rank tests and by `lifecycle experiment`; `lifecycle run --nproc` uses torchrun.
The function must be importable (module level) and its result picklable. Also: `die_with_parent`,
how a launched process makes sure it does not outlive the process that launched it.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import socket
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.queues import SimpleQueue
from typing import TypeVar, cast

from lifecycle.errors import RankFailed
from lifecycle.launchers import torchrun_env

PR_SET_PDEATHSIG = 1  # linux/prctl.h
T = TypeVar("T")
Reply = tuple[int, bool, object]
"""What a rank sends back: (rank, ok, what `fn` returned, or the error text)."""


def die_with_parent(signum: int = signal.SIGTERM) -> bool:
    """Have the kernel send `signum` to this process when the thread that started it exits (Linux
    `prctl(PR_SET_PDEATHSIG)`): a launcher killed even by SIGKILL takes what it launched with it.
    False where the platform has no such call."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _worker(
    fn: Callable[..., object], rank: int, nproc: int, port: int, args: Sequence[object], queue: SimpleQueue[Reply]
) -> None:
    os.environ.update(torchrun_env(rank=rank, world_size=nproc, master_addr="127.0.0.1", master_port=port))
    try:
        queue.put((rank, True, fn(*args)))
    except BaseException as exc:  # the parent reports it with the rank
        queue.put((rank, False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


def run_ranks(fn: Callable[..., T], nproc: int, *args: object, timeout_s: float = 600.0) -> list[T]:
    """Call `fn(*args)` on ranks 0..nproc-1 in fresh processes; return results ordered by rank."""
    ctx = mp.get_context("spawn")
    queue: SimpleQueue[Reply] = ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(fn, r, nproc, port, args, queue)) for r in range(nproc)]
    for proc in procs:
        proc.start()
    results: dict[int, T] = {}
    errors: dict[int, str] = {}
    import time

    deadline = time.monotonic() + timeout_s
    while len(results) + len(errors) < nproc:
        if not queue.empty():
            rank, ok, value = queue.get()
            if ok:
                results[rank] = cast(T, value)  # what `fn` returned on that rank, pickled across
            else:
                errors[rank] = str(value)
            continue
        dead = [i for i, p in enumerate(procs) if not p.is_alive() and p.exitcode not in (0, None)]
        if dead and queue.empty():
            errors.update({i: f"exited with code {procs[i].exitcode}" for i in dead if i not in errors})
            break
        if time.monotonic() > deadline:
            errors.update({i: "timed out" for i in range(nproc) if i not in results and i not in errors})
            break
        time.sleep(0.01)
    for proc in procs:
        proc.join(timeout=5 if not errors else 1)
        if proc.is_alive():
            proc.kill()
    if errors:
        rank = min(errors)
        raise RankFailed(f"rank {rank} failed: {errors[rank]}", rank=rank, errors=errors)
    return [results[r] for r in range(nproc)]
