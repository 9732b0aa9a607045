"""A signal this process received that its main thread has not handled: the main thread is blocked.

Python runs a signal handler on the main thread, between two bytecodes. A main thread blocked in
native code (a gloo collective, a TCPStore wait, `init_process_group`) runs it only when that call
returns, and it may never return: the peer it waits for is blocked too, or gone. The C-level handler
still runs at once, on whichever thread the kernel picked, and writes the signal's number to the
wakeup fd (`signal.set_wakeup_fd`). `SignalWatch` reads that fd on a thread of its own; when the
main thread has not taken the signal `grace_s` later, it calls `on_blocked(signum, waited_s)` on
that thread (the engine logs `startup_aborted` and ends the process: docs/failures.md).

`pending_signal()` tells the rank watch (lifecycle/rankwatch) that this process got a signal it is
still blocked on: the signal, not a peer's failure, is what stops it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable

WATCH_THREAD = "lifecycle-signal-watch"
"""The name of a watch's reader thread (the ledger does not count it as a cycle's worker)."""
GRACE_S = 3.0
"""How long the main thread has to take a signal before the watch calls it blocked."""

POLL_S = 0.05
"""How often the watch looks whether the main thread took the signal; the grace is also counted in
these polls (a process stalled as a whole polled none of them)."""
_ARMED: list[SignalWatch] = []  # the armed watches, innermost (the one the wakeup fd feeds) last


def pending_signal() -> int | None:
    """The signal the armed watch got and the main thread has not taken yet, or None."""
    return _ARMED[-1].pending() if _ARMED else None


def took(signum: int) -> None:
    """A handler on the main thread took `signum` (safe inside a handler: no lock). The watch the
    wakeup fd fed it to may not be the handler's own: a lifecycle left mid-startup keeps its watch
    armed, and the fd goes back to it when a later one disarms, while the later one's handler still
    runs (a Ctrl-C during its shutdown). That watch sees the count move since the fd came back to it
    and stops waiting, instead of ending the process `grace_s` later for a signal that was handled
    (whether its thread read the byte before or after the handler ran)."""
    _TOOK[signum] = _TOOK.get(signum, 0) + 1


_TOOK: dict[int, int] = {}
"""How many times a handler on the main thread took each signal (`took`)."""


def _forget_in_child() -> None:
    """A forked child (a data loader's worker) keeps its parent's wakeup fd: its signals would reach
    the parent's watch. It gets back the one set before the first watch armed (asyncio, once
    imported, resets it to none in a child as well)."""
    if _ARMED:
        previous = _ARMED[0]._previous
        for watch in _ARMED:
            watch._write = -1
        _ARMED.clear()
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(previous)


os.register_at_fork(after_in_child=_forget_in_child)


class SignalWatch:
    """Watches `signals` while armed (between `arm` and `disarm`, both on the main thread).

    The handlers for `signals` call `taken()` first: from then on the main thread is known to run
    them and the watch does nothing more until it is armed again. Another wakeup fd that was set
    (asyncio's) keeps getting every signal's byte, forwarded.
    """

    def __init__(
        self,
        signals: Iterable[int],
        on_blocked: Callable[[int, float], object],
        *,
        grace_s: float = GRACE_S,
        owns: Callable[[int], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.signals = frozenset(int(s) for s in signals)
        self.on_blocked = on_blocked
        self.owns = owns
        """Whether the handler installed for a signal now is this watch's owner's: a watch left armed
        (its lifecycle never shut down) whose handler another one replaced is not the one blocked."""
        self.grace_s = grace_s
        self.clock = clock
        """The clock the grace is measured on (a test passes one that stalls or jumps)."""
        self._write = -1
        self._previous = -1
        self._forward = -1
        """Where the reader forwards every byte (the wakeup fd before any armed watch's), or -1."""
        self._received: tuple[int, float] | None = None
        self._taken = False
        self._thread: threading.Thread | None = None
        self._took_since: dict[int, int] = {}
        """`_TOOK` when the wakeup fd last came to this watch (its arming, or an inner watch's disarm)."""

    @property
    def armed(self) -> bool:
        return self._write != -1

    def arm(self) -> None:
        """Route the wakeup fd to this watch and start its reader (main thread only; else nothing)."""
        if self.armed or threading.current_thread() is not threading.main_thread():
            return
        read, write = os.pipe()
        os.set_blocking(write, False)  # the C-level handler must never block on it
        try:
            self._previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        except (ValueError, OSError):  # not the main interpreter: no watch, the handlers still work
            os.close(read)
            os.close(write)
            return
        if self._previous == write:  # a closed fd left set (its owner never reset it), now our pipe's
            self._previous = -1
        self._write, self._received, self._taken = write, None, False
        self._took_since = dict(_TOOK)
        # Forward to the fd set before this watch; when that is an armed watch's own pipe (a lifecycle
        # left mid-startup), to where that watch forwards: asyncio's fd, set before both, still gets
        # every byte, and no watch is fed a signal another one took.
        outer = next((w for w in _ARMED if w._write == self._previous), None)
        forward = self._previous if outer is None else outer._forward
        self._forward = forward
        _ARMED.append(self)
        self._thread = threading.Thread(target=self._read, args=(read, forward), name=WATCH_THREAD, daemon=True)
        self._thread.start()

    def disarm(self) -> None:
        """Give the wakeup fd back to whoever had it; the reader ends (main thread only).

        Watches disarmed out of order (two lifecycles shut down in the order they started): one
        armed over this one holds the fd and gets this one's `_previous` to give back in its turn,
        so no fd is left set that is closed (a closed fd set as the wakeup fd loses every signal,
        and a pipe that later reuses its number would feed itself)."""
        if not self.armed or threading.current_thread() is not threading.main_thread():
            return
        over = next((w for w in _ARMED if w is not self and w._previous == self._write), None)
        if over is not None:
            over._previous = self._previous
        else:
            _give_back(self._previous, self._write)
            for outer in _ARMED:
                if outer._write == self._previous:  # the fd is that watch's again, from now
                    outer._took_since = dict(_TOOK)
        with contextlib.suppress(ValueError):
            _ARMED.remove(self)
        write, self._write = self._write, -1
        os.close(write)  # the reader sees the end of the pipe and ends: no thread outlives the startup
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None

    def taken(self) -> None:
        """The main thread runs a handler for one of the signals (safe inside a handler: no lock)."""
        self._taken = True

    def pending(self) -> int | None:
        """The signal received while armed that the main thread has not taken, or None."""
        received = self._received
        return received[0] if received is not None and not self._taken else None

    def _read(self, read: int, forward: int) -> None:
        # A thread starts with its creator's signal mask. A process started with the signals blocked
        # (its parent left them blocked: the mask survives fork and exec) would never see them on any
        # thread: the scheduler's SIGTERM would wait, pending, for its SIGKILL. This thread takes them.
        with contextlib.suppress(ValueError, OSError):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, self.signals)
        try:
            while data := os.read(read, 64):
                if forward != -1:
                    with contextlib.suppress(OSError):
                        os.write(forward, data)
                signum = next((s for s in data if s in self.signals), None)
                if signum is not None and self._received is None and not self._taken:
                    self._received = (signum, self.clock())
                if self.pending() is not None:
                    self._wait_for_main_thread()
        finally:
            os.close(read)

    def _wait_for_main_thread(self) -> None:
        """Until the main thread takes the signal, the watch is disarmed, or `grace_s` passed, on the
        clock and on this thread's own count of its polls: a process stalled as a whole (a loaded
        machine, a CPU quota) gave the main thread no chance to run either, and it gets one more."""
        assert self._received is not None
        signum, since = self._received
        polls = 0
        while not self._taken and self.armed:
            if _TOOK.get(signum, 0) != self._took_since.get(signum, 0):
                self._taken = True  # a handler took it: another lifecycle's (see `took`)
                return
            waited = self.clock() - since
            if waited >= self.grace_s and polls * POLL_S >= self.grace_s:
                self._taken = True  # once: whatever `on_blocked` does, the watch is done with it
                if self.owns is None or self.owns(signum):
                    self.on_blocked(signum, waited)
                return
            if polls == 1 and self.owns is not None and self.owns(signum):
                _to_main_thread(signum)  # its handler tells this watch it took it: it runs once
            time.sleep(POLL_S)
            polls += 1


def _to_main_thread(signum: int) -> None:
    """The signal once more, to the main thread itself. The kernel gives a process's signal to any thread
    that does not block it, not only the main one (this watch's reader unblocks them; torch's threads
    leave them open); Python then runs the handler only when the main thread next runs bytecode, and a
    main thread asleep (`time.sleep`, a poll's pause) sleeps on to its end. Sent to the main thread, the
    signal interrupts its sleep, as it would have, sent there first; in a native wait it does what the
    first one would have done there. Sent only while the watch's owner's handler is installed (`owns`):
    that handler tells the watch it took the signal, so the signal is sent on only while it has not run,
    and Python runs a handler once for the deliveries it finds pending together."""
    with contextlib.suppress(ValueError, OSError, AttributeError):
        main = threading.main_thread().ident
        if main is not None and main != threading.get_ident():
            signal.pthread_kill(main, signum)


def _give_back(previous: int, mine: int) -> None:
    """The wakeup fd back to `previous` (none when that fd is closed now), unless someone else set
    theirs after `mine` (asyncio, started later): it stays."""
    with contextlib.suppress(ValueError, OSError):
        try:
            current = signal.set_wakeup_fd(previous)
        except (ValueError, OSError):  # closed meanwhile by whoever set it
            current = signal.set_wakeup_fd(-1)
        if current != mine:
            signal.set_wakeup_fd(current)
