"""The one owner of the processes that run ranks: start N local ranks (spawned, env:// rendezvous),
collect each rank's result, and never leave one behind.

Used by `lifecycle check-binding`, `lifecycle experiment` and multi-rank tests; `lifecycle run
--nproc` uses torchrun, owned the same way (`die_with_parent`, `cli/_launch.py`). The owner:

- takes its ranks with it: when `run_ranks` ends in any way (a failure, a timeout, Ctrl-C) it stops
  the ranks still running and what they forked (each rank runs in its own process group): SIGTERM,
  then SIGKILL `KILL_AFTER_S` later. Killed, even by SIGKILL, it leaves that to the fork server,
  which does the same before it exits; a forked rank gets SIGKILL from the kernel when the server
  dies (`die_with_parent`), a spawned one SIGTERM when its owner does;
- treats a rank that ends without a result, with any exit status (`os._exit(0)` included), as failed
  at once, with the last lines it printed (each rank's stdout and stderr go to a file of the owner's);
- bounds the user's callables inside a rank (`bounded`): one that does not return within
  `startup.timeout_s` ends its rank with one line naming it and the state.

How ranks start (`start_method`): on a machine without an accelerator device, each rank is forked
from one server that imported torch and megatron-core once (`_preload.py`), instead of importing
them again (about 10 s of CPU a rank). The server is started by the first call and lives as long as
this process; each rank still gets this process's working directory, `sys.path` and environment
as they are at the call. Where an NVIDIA or AMD device exists, each rank is a fresh interpreter
(spawn), because a process forked from one that reached the CUDA driver cannot use CUDA.
`LIFECYCLE_RANKS_START=spawn` or `forkserver` chooses.

The function must be importable (module level) and its result picklable.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Literal, ParamSpec, TypeVar, TypeVarTuple, Unpack, cast

from lifecycle.errors import ConfigError, RankFailed
from lifecycle.launchers import torchrun_env
from lifecycle.launchers._owned import KILL_AFTER_S as KILL_AFTER_S
from lifecycle.launchers._owned import die_with_parent as die_with_parent
from lifecycle.launchers._owned import end_group

if TYPE_CHECKING:
    from multiprocessing.context import ForkServerContext, ForkServerProcess, SpawnContext, SpawnProcess
    from types import FrameType

EXIT_BOUND = 124
"""The exit status of a rank whose user callable overran its bound (`bounded`; as timeout(1))."""
SETTLE_S = 15.0
"""After a rank failed, how long the others have to end by themselves before the owner stops them:
each rank's watch ends it a few seconds after a peer's failure, logging `peer_failed` (a peer that
published nothing is found lost after `stale_s`, 8 s, and ended `grace_s`, 3 s, later)."""
TAIL_CHARS = 4000
START_VARIABLE = "LIFECYCLE_RANKS_START"
START_METHODS = ("forkserver", "spawn")
ACCELERATOR_DEVICES = ("/dev/nvidiactl", "/dev/kfd")
"""Device files whose presence means CUDA (or ROCm) may be reached: ranks are spawned there."""
PRELOAD = "lifecycle.launchers._preload"
_OVERRAN = re.compile(r"lifecycle: rank \d+: .+ did not return within startup\.timeout_s = ")
"""The line `bounded` prints (a rank that exits 124 for another reason is not one that overran)."""
T = TypeVar("T")
Ts = TypeVarTuple("Ts")
P = ParamSpec("P")


def start_method(environ: Mapping[str, str] | None = None) -> str:
    """How `run_ranks` starts ranks: `LIFECYCLE_RANKS_START` when set, else "spawn" where an
    accelerator device exists (`ACCELERATOR_DEVICES`) and "forkserver" where none does. A value
    other than those in `START_METHODS` is refused in one line naming the variable."""
    env = os.environ if environ is None else environ
    chosen = env.get(START_VARIABLE, "").strip()
    if chosen:
        if chosen not in START_METHODS:
            problem = (
                f"{START_VARIABLE}={chosen!r} is not a way to start ranks; set it to forkserver or spawn, or unset it"
            )
            raise ConfigError(problem, field=START_VARIABLE, problems=[problem])
        return chosen
    return "spawn" if any(os.path.exists(device) for device in ACCELERATOR_DEVICES) else "forkserver"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def bounded(fn: Callable[P, T], *, what: str, state: str, timeout_s: float) -> Callable[P, T]:
    """`fn`, ended if a call does not return within `timeout_s`: the rank prints one line naming
    `what` (e.g. "binder mypkg:bind"), the bound and `state`, and exits `EXIT_BOUND` at once. A call
    blocked in native code cannot be interrupted, so the rank ends; its owner reports the line."""

    def call(*args: P.args, **kwargs: P.kwargs) -> T:
        def overran() -> None:
            rank = os.environ.get("RANK", "0")
            print(
                f"lifecycle: rank {rank}: {what} did not return within startup.timeout_s = {timeout_s:g} s in "
                f"{state}; find what it waits for, or raise startup.timeout_s.",
                file=sys.stderr,
                flush=True,
            )
            os._exit(EXIT_BOUND)

        timer = threading.Timer(timeout_s, overran)
        timer.daemon = True
        timer.start()
        try:
            return fn(*args, **kwargs)
        finally:
            timer.cancel()
            timer.join()

    return call


@dataclass(frozen=True, slots=True)
class _Rank:
    """One rank the owner started: its process, the read end of its reply pipe, its output file."""

    rank: int
    process: SpawnProcess | ForkServerProcess
    reply: Connection
    output: Path


def _enter(parent: int | None, output: str, environ: Mapping[str, str]) -> bool:
    """The start of every process started here: leave the fork server (when forked), die with the
    parent, write stdout and stderr to `output` (the owner reads it back when the process fails),
    take the owner's environment as it was at the call. Whether this process was forked."""
    forked = _leave_fork_server()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server's handler (`_preload`) is not the rank's
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)  # its own group: what it forks ends with it (`_stop`, the server's end)
    # Forked: the server dies only after it stopped its ranks (SIGTERM, then SIGKILL: `_preload`), or
    # when killed; then SIGKILL, which a rank stuck in native code with a SIGTERM handler cannot outlive.
    die_with_parent(signal.SIGKILL if forked else signal.SIGTERM, parent=parent)
    with open(output, "ab", buffering=0) as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
    os.environ.clear()  # a forked process has the server's environment: take the owner's at the call
    os.environ.update(environ)
    if forked:
        _reseed()
    return forked


def _reseed() -> None:
    """A forked process starts with the server's random states. Python's `random` reseeds itself
    after a fork and torch's default generator starts from one fixed seed in every interpreter; NumPy's
    global generator would be the server's in every rank, where a fresh interpreter seeds it from the
    OS: so it is seeded from the OS here (an unseeded draw differs between ranks and between runs,
    as it does between launched ranks)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _leave(forked: bool) -> None:
    """The end of every process started here: the server ends a forked one with os._exit, so run
    what a spawned one's interpreter exit runs (atexit: a lifecycle left open is shut down)."""
    if forked:
        sys.stdout.flush()
        sys.stderr.flush()
        atexit._run_exitfuncs()


def _worker(
    fn: Callable[[Unpack[Ts]], object],
    rank: int,
    nproc: int,
    port: int,
    args: tuple[Unpack[Ts]],
    reply: Connection,
    parent: int | None,
    output: str,
    environ: Mapping[str, str],
) -> None:
    forked = _enter(parent, output, environ)
    os.environ.update(torchrun_env(rank=rank, world_size=nproc, master_addr="127.0.0.1", master_port=port))
    try:
        result = (True, fn(*args))
    except BaseException as exc:  # the owner reports it with the rank
        result = (False, (f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    reply.send(result)
    reply.close()
    _leave(forked)


def _process(
    target: Callable[[Unpack[Ts]], int],
    args: tuple[Unpack[Ts]],
    parent: int | None,
    output: str,
    environ: Mapping[str, str],
) -> None:
    forked = _enter(parent, output, environ)
    try:
        code = target(*args)
    finally:
        _leave(forked)
    sys.exit(code)


def start_process(
    target: Callable[[Unpack[Ts]], int],
    *args: Unpack[Ts],
    output: Path,
    environ: Mapping[str, str] | None = None,
) -> SpawnProcess | ForkServerProcess:
    """Start `target(*args)` in a new process as `run_ranks` starts a rank (`start_method`; the
    environment `environ`, by default this process's as it is now; dying with this process; stdout
    and stderr appended to `output`) and return it, started. Its exit status is what `target`
    returns; the caller owns it (`join`, `terminate`, `kill`, `exitcode`, `pid`). `target` must be
    importable (module level)."""
    env = dict(os.environ if environ is None else environ)
    ctx, parent = _context(start_method(env))
    proc = ctx.Process(target=_process, args=(target, args, parent, str(output), env))
    proc.start()
    return proc


def _leave_fork_server() -> bool:
    """In a rank forked from the fork server, close the server's "alive" pipe that the stdlib hands
    each child: the server ends when the last holder closes it, and ends its ranks then (they die
    with it); a rank that held it would keep it, and so itself, alive after a SIGKILLed owner.
    Nothing to do in a spawned rank. Whether this rank was forked from the server."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    fd: int | None = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None and getattr(server, "_forkserver_pid", None) is None:  # a child's, not an owner's
        with contextlib.suppress(OSError):
            os.close(fd)
        setattr(server, "_forkserver_alive_fd", None)  # noqa: B010  # not in the stubs
        return True
    return False


def run_ranks(fn: Callable[[Unpack[Ts]], T], nproc: int, *args: Unpack[Ts], timeout_s: float = 600.0) -> list[T]:
    """Call `fn(*args)` on ranks 0..nproc-1 in fresh processes; return results ordered by rank.

    Raises `RankFailed` when a rank raised, ended without a result, or did not finish within
    `timeout_s`, naming the rank that failed first (`rank`): `errors` maps each failed rank, in the
    order they failed, to one line, `output` to its traceback or the last lines it printed. No rank
    outlives the call."""
    ctx, parent = _context(start_method())
    port, outputs = free_port(), Path(tempfile.mkdtemp(prefix="lifecycle-ranks-"))
    ranks: list[_Rank] = []
    previous = _exit_on_sigterm()
    environ = dict(os.environ)
    try:
        for r in range(nproc):
            receive, send = ctx.Pipe(duplex=False)
            out = outputs / f"rank-{r:05d}.out"
            proc = ctx.Process(target=_worker, args=(fn, r, nproc, port, args, send, parent, str(out), environ))
            proc.start()
            send.close()
            ranks.append(_Rank(r, proc, receive, out))
        results, errors, details = _collect(ranks, timeout_s)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        _stop(ranks)
        shutil.rmtree(outputs, ignore_errors=True)
    if errors:
        first = next(iter(errors))  # in the order the ranks failed: the first one is the cause
        raise RankFailed(
            f"rank {first} failed: {errors[first]}\n{details.get(first, '')}".rstrip(),
            rank=first,
            errors=errors,
            output=details,
        )
    return [cast(T, results[r]) for r in range(nproc)]  # what `fn` returned on that rank, pickled across


def _context(method: str) -> tuple[SpawnContext | ForkServerContext, int | None]:
    """The multiprocessing context for `method` and the pid each rank's parent has: this process
    when spawned, the fork server (started here, preloaded, if not running) when forked."""
    import multiprocessing as mp
    from multiprocessing import forkserver

    if method == "spawn":
        return mp.get_context("spawn"), os.getpid()
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([PRELOAD])
    server = forkserver._forkserver  # the stdlib's one server per process
    server.ensure_running()
    pid: int | None = getattr(server, "_forkserver_pid", None)  # not public; without it no early check
    return ctx, pid


def _exit_on_sigterm() -> signal.Handlers | Callable[..., object] | int | None:
    """On the main thread, SIGTERM while the ranks run ends this process as SIGTERM's default would
    (exit 143), but through `run_ranks`' cleanup: its ranks stopped, its files removed. The handler
    it replaced, or None off the main thread (the ranks still die with this process then)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous: signal.Handlers | Callable[..., object] | int | None = signal.signal(signal.SIGTERM, stop)
    return previous if previous is not None else signal.SIG_DFL


def _collect(ranks: list[_Rank], timeout_s: float) -> tuple[dict[int, object], dict[int, str], dict[int, str]]:
    """Wait for every rank's reply or end: (results, one line per failed rank, its longer text)."""
    from multiprocessing.connection import wait

    results: dict[int, object] = {}
    errors: dict[int, str] = {}
    details: dict[int, str] = {}
    deadline = time.monotonic() + timeout_s
    settle: float | None = None  # when the others stop waiting for a failed rank's peers
    pending = {r.rank: r for r in ranks}
    while pending:
        now = time.monotonic()
        limit = min(deadline, settle) if settle is not None else deadline
        if now >= limit:
            why = (
                f"timed out after {timeout_s:g} s"
                if now >= deadline
                else f"stopped after rank {next(iter(errors))} failed"
            )
            for r in pending:
                errors[r] = why
            break
        ready = wait([x for r in pending.values() for x in (r.reply, r.process.sentinel)], timeout=limit - now)
        for rank in [r for r in pending.values() if r.reply in ready or r.process.sentinel in ready]:
            outcome = _outcome(rank)
            if outcome is None:  # still running, nothing said yet
                continue
            del pending[rank.rank]
            if outcome[0]:
                results[rank.rank] = outcome[1]
            else:
                errors[rank.rank], details[rank.rank] = outcome[1]
                settle = settle if settle is not None else time.monotonic() + SETTLE_S
    return results, errors, details


def _outcome(rank: _Rank) -> tuple[Literal[True], object] | tuple[Literal[False], tuple[str, str]] | None:
    """(ok, result or (line, details)) once `rank` replied and ended; a rank that ended without a
    reply failed, with the last lines it printed. None while it runs."""
    reply: tuple[Literal[True], object] | tuple[Literal[False], tuple[str, str]] | None = None  # as `_worker` sends it
    if rank.reply.poll():
        try:
            reply = rank.reply.recv()
        except (EOFError, OSError):
            reply = None
    if reply is not None:
        rank.process.join(KILL_AFTER_S)  # it only closes its pipe and returns
        return reply if reply[0] else (False, _one_line(reply[1]))
    if rank.process.exitcode is None and rank.process.is_alive():
        return None
    rank.process.join()
    printed = _tail(rank.output)
    last = next((line.strip() for line in reversed(printed.splitlines()) if line.strip()), "")
    code = rank.process.exitcode
    if code == EXIT_BOUND and _OVERRAN.match(last):
        return False, (last.split(": ", 2)[-1], printed)
    ended = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited {code}"
    if code is not None and -code in signal.valid_signals():
        ended = f"was killed by {signal.Signals(-code).name}"
    said = f"; it last printed: {last[:300]}" if last else "; it printed nothing"
    return False, (f"{ended} without a result{said}", printed)


def _one_line(error: tuple[str, str]) -> tuple[str, str]:
    """A rank's error as (its first line, the traceback)."""
    line, trace = error
    lines = [x.strip() for x in line.splitlines() if x.strip()]
    return ("; ".join(lines)[:500] or "raised", trace)


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - TAIL_CHARS))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _stop(ranks: list[_Rank]) -> None:
    """End every rank still running and every process left in a rank's group (what it forked):
    SIGTERM (each releases and logs `startup_aborted`), then SIGKILL `KILL_AFTER_S` later."""
    alive = [r.process for r in ranks if r.process.is_alive()]
    for proc in alive:
        end_group(proc.pid, signal.SIGTERM, alive=True)
    end = time.monotonic() + KILL_AFTER_S
    for proc in alive:
        proc.join(max(0.0, end - time.monotonic()))
    for r in ranks:
        end_group(r.process.pid, signal.SIGKILL, alive=r.process.is_alive())
        if r.process.pid is not None:
            r.process.join()
        r.reply.close()
