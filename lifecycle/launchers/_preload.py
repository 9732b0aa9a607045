"""What the ranks' fork server imports once, so that `run_ranks` does not pay it in every rank.

A rank's own imports of torch and megatron-core take about 10 s of CPU each time (3.4 s torch,
6.7 s megatron-core, of which 3.75 s is its fused kernels' `torch.compile` importing
`torch._dynamo`). `run_ranks` forks its ranks from a server that imported them once (`local.py`,
`start_method`). This module is what that server imports:

- quietly: what the imports print (megatron-core's warnings that Transformer Engine and Apex are
  absent) goes nowhere, so that the owner's terminal is not written by a process it did not ask to
  print; a rank that imports megatron again sees no warning;
- never failing: a module that cannot be imported is left to the rank, which imports it itself and
  reports the error as it always did;
- without CUDA: importing torch and megatron-core on a machine without an NVIDIA device reaches no
  driver (`local.py` spawns instead where one exists);
- ended with its owner: the server notices its owner's end (the "alive" pipe's EOF) only once these
  imports are done, about 10 s; an owner that ends during them (killed, Ctrl-C) ends the server at
  once (`_ends_with_owner`: the server's parent checked every `WATCH_S`; one thread, for the imports);
- ended at once: the server's own exit skips the interpreter's teardown of torch and megatron-core
  (1.5 to 3.5 s of CPU here), which nothing in it needs (`_exit_at_once`; a rank forked from it
  runs its own exit as it always did);
- ended after its ranks: before it exits (its owner ended, or it got SIGTERM) it stops the ranks
  still running and what they forked, SIGTERM then SIGKILL `KILL_AFTER_S` later (`_stop_ranks`);
  a rank also gets SIGKILL from the kernel when the server dies, even killed (`local._enter`).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

from lifecycle.launchers._proc import proc_stat

MODULES = ("torch", "torch.distributed", "megatron.core")
"""Imported by the server, in order; every rank that runs megatron imports these."""
WATCH_S = 0.05
"""How often, during the imports, the server checks that its owner still runs."""


def _ends_with_owner() -> Callable[[], None]:
    """Until the returned function is called, end this process (exit status 0, as the stdlib's server
    ends when its owner does) as soon as its parent is no longer the one it had. The check stops
    before the server forks its first rank, so that ranks are forked from a single thread."""
    owner = os.getppid()
    done = threading.Event()

    def watch() -> None:
        while not done.wait(WATCH_S):
            if os.getppid() != owner:
                os._exit(0)

    watcher = threading.Thread(target=watch, name="lifecycle-preload-owner", daemon=True)
    watcher.start()

    def stop() -> None:
        done.set()
        watcher.join()

    return stop


def _exit_at_once() -> None:
    """From now on this process (the server, not a rank forked from it) ends with `os._exit` when the
    interpreter would exit: the first exit function to run, as the last registered."""
    server = os.getpid()

    def leave() -> None:
        if os.getpid() == server:
            with contextlib.suppress(Exception):
                _stop_ranks()
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(0)  # the status of the stdlib server's SystemExit when its owner ends

    atexit.register(leave)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # a rank puts back the default (`local._enter`)


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # through `leave`: the ranks are stopped first


def _children() -> list[int]:
    """The processes this one started that have not been reaped: its ranks (one scan of /proc)."""
    me = os.getpid()
    found = (proc_stat(int(entry)) for entry in os.listdir("/proc") if entry.isdigit())
    return [stat.pid for stat in found if stat is not None and stat.ppid == me]


def _stop_ranks() -> None:
    """Stop the ranks still running and what each forked (its group): SIGTERM, so that each releases
    and logs, then SIGKILL `KILL_AFTER_S` later for those still running (`local._stop`, for the ranks
    of an owner that is gone)."""
    from lifecycle.launchers._owned import KILL_AFTER_S, end_group

    ranks = _children()
    for pid in ranks:
        end_group(pid, signal.SIGTERM, alive=True)
    running, end = set(ranks), time.monotonic() + KILL_AFTER_S
    while running and time.monotonic() < end:
        for pid in list(running):
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == 0:
                    continue
            running.discard(pid)
        if running:
            time.sleep(0.05)
    for pid in ranks:
        end_group(pid, signal.SIGKILL, alive=pid in running)


def _preload() -> None:
    stop_watching = _ends_with_owner()
    try:
        _import_quietly()
    finally:
        stop_watching()
    _exit_at_once()


def _import_quietly() -> None:
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        saved = [os.dup(1), os.dup(2)]
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            for name in MODULES:
                try:
                    importlib.import_module(name)
                except BaseException:  # the rank imports it again and reports the error
                    break
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


_preload()
